"""The documentation checked against the code.

- Every module path README.md and docs/ name (``airflow_stateful_provider.x.y``,
  ``airflow_stateful_provider/x/y.py``, ``streams/x/y.py``) exists, and outside contributor
  sections it is public: the engine's package ``airflow_stateful_provider.streams``, the
  Airflow subpackages (hooks, operators, sensors, triggers), the shipped examples, and the two
  programs a user runs (the Spark application ``spark/app.py`` and the runner). Contributor
  sections are the pages docs/index.md lists under "For contributors" and, on any other
  page, a section whose heading starts with "For contributors".
- Every ``python`` block imports only public paths, every name it imports exists, every name
  it uses is imported or defined in it, and the blocks that need no broker run as written
  (their asserts are part of the check).
- Every relative link points at a file that exists, and at a heading of it when it names one.
- Every picture in docs/pictures/ is drawn by a script there and linked from a page.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
PACKAGE = REPO_ROOT / "airflow_stateful_provider"
PAGES = [REPO_ROOT / "README.md", REPO_ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]

ENGINE_PACKAGE = "airflow_stateful_provider.streams"
PUBLIC_SUBPACKAGES = tuple(f"airflow_stateful_provider.{name}" for name in
                           ("hooks", "operators", "sensors", "triggers", "examples"))
#: Programs a user runs by path or ``python -m``.
PUBLIC_PROGRAMS = ("airflow_stateful_provider.spark.app", "airflow_stateful_provider.streams.runner")
BROKER_ADDRESSES = ("broker:9092", "localhost:9092")
#: Directories inside the package that docs name relative to it (``streams/state/rocks.py``).
PACKAGE_DIRS = tuple(sorted({p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("_")} |
                            {p.name for p in (PACKAGE / "streams").iterdir()
                             if p.is_dir() and not p.name.startswith("_")}))
MODULE_PATH = re.compile(
    r"airflow_stateful_provider(?:\.[A-Za-z_][A-Za-z0-9_]*)+"          # dotted
    r"|airflow_stateful_provider(?:/[A-Za-z_][A-Za-z0-9_]*)+(?:\.py)?"  # a file of the package
    rf"|(?<![\w./-])(?:{'|'.join(PACKAGE_DIRS)})(?:/[A-Za-z_][A-Za-z0-9_]*)*/[A-Za-z_][A-Za-z0-9_]*\.py")


#: A module named by its file alone (``changelog_reader.py``): internal when no public module has that name.
BARE_MODULE = re.compile(r"(?<![\w./-])([a-z_][a-z0-9_]*)\.py\b")


def contributor_pages() -> set[str]:
    """The pages docs/index.md lists in its "For contributors" section."""
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    section = re.search(r"^## For contributors\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "docs/index.md has no '## For contributors' section"
    return {name for name in re.findall(r"\]\(([\w-]+\.md)\)", section.group(1))}


def user_text(path: Path) -> str:
    """The page's text outside its contributor sections ("" for a contributor page)."""
    if path.parent == DOCS and path.name in contributor_pages():
        return ""
    kept, skipping_level = [], None
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = None if in_code else re.match(r"^(#+) (.*)", line)
        if heading:
            level = len(heading.group(1))
            if skipping_level is not None and level <= skipping_level:
                skipping_level = None
            if skipping_level is None and heading.group(2).startswith("For contributors"):
                skipping_level = level
        if skipping_level is None:
            kept.append(line)
    return "\n".join(kept)


TOP_LEVEL = {p.name for p in PACKAGE.iterdir() if p.is_dir()}


def dotted(path: str) -> str:
    """The module a mention names: ``streams/state/rocks.py`` and ``state/rocks.py`` are
    ``airflow_stateful_provider.streams.state.rocks``, ``spark/app.py`` is
    ``airflow_stateful_provider.spark.app``."""
    if "/" not in path:
        return path
    parts = path.removesuffix(".py").split("/")
    if parts[0] == "airflow_stateful_provider":
        return ".".join(parts)
    prefix = ["airflow_stateful_provider"] if parts[0] in TOP_LEVEL else ["airflow_stateful_provider", "streams"]
    return ".".join(prefix + parts)


def module_exists(path: str) -> bool:
    """A module, a package, or an attribute of the longest module prefix."""
    parts = dotted(path).split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is not None:
            target = importlib.import_module(module)
            for attribute in parts[end:]:
                if not hasattr(target, attribute):
                    return False
                target = getattr(target, attribute)
            return True
    return False


def is_public(path: str) -> bool:
    import airflow_stateful_provider.streams as streams

    name = dotted(path)
    if name == ENGINE_PACKAGE or (name.startswith(ENGINE_PACKAGE + ".")
                                  and name[len(ENGINE_PACKAGE) + 1:].split(".")[0] in streams.__all__):
        return True  # the engine's package, or a name it exports
    return name in PUBLIC_PROGRAMS or any(name == p or name.startswith(p + ".") for p in PUBLIC_SUBPACKAGES)


MENTIONS = [(page, match.group(0)) for page in PAGES for match in MODULE_PATH.finditer(page.read_text("utf-8"))]


@pytest.mark.parametrize("page, path", MENTIONS, ids=[f"{p.name}:{m}" for p, m in MENTIONS])
def test_every_module_path_a_page_names_exists(page, path):
    assert module_exists(path.rstrip(".")), f"{page.relative_to(REPO_ROOT)} names {path}, which does not exist"


def bare_internal_modules(text: str) -> set[str]:
    modules = {p.relative_to(REPO_ROOT).with_suffix("").as_posix() for p in PACKAGE.rglob("*.py")}
    found = set()
    for match in BARE_MODULE.finditer(text):
        named = [m for m in modules if m.endswith("/" + match.group(1))]
        if named and not any(is_public(m) for m in named):
            found.add(match.group(0))
    return found


def test_user_documentation_names_only_public_module_paths():
    internal = sorted({f"{page.relative_to(REPO_ROOT)}: {match.group(0)}" for page in PAGES
                       for match in MODULE_PATH.finditer(user_text(page)) if not is_public(match.group(0))}
                      | {f"{page.relative_to(REPO_ROOT)}: {name}" for page in PAGES
                         for name in bare_internal_modules(user_text(page))})
    assert not internal, "internal module paths outside contributor sections:\n" + "\n".join(internal)


def test_documentation_cites_no_file_outside_the_repository():
    cited = [f"{page.name}: {m.group(0)}" for page in PAGES
             for m in re.finditer(r"\.\./shared|SEMANTICS(?:\.md| §)", page.read_text("utf-8"))]
    assert not cited, cited


# ---------------------------------------------------------------------------- links and pictures

LINKS = [(page, target) for page in PAGES
         for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text("utf-8")) if "://" not in target]


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a page's headings, and the ones it names with ``<a id="...">``."""
    text = path.read_text("utf-8")
    found = set(re.findall(r'<a id="([^"]+)"></a>', text))
    for heading in re.findall(r"^#+ (.*)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("page, target", LINKS, ids=[f"{p.name}->{t}" for p, t in LINKS])
def test_relative_links_reach_a_file_and_heading(page, target):
    file, _, anchor = target.partition("#")
    destination = (page.parent / file).resolve() if file else page
    assert destination.exists(), f"{page.name} links to {target}: no such file"
    if anchor and destination.suffix == ".md":
        assert anchor in anchors(destination), f"{page.name} links to {target}: no such heading"


PICTURES = sorted(p for p in (DOCS / "pictures").glob("*") if p.suffix in (".svg", ".png"))


def test_docs_hold_at_least_four_pictures():
    assert len(PICTURES) >= 4, PICTURES


@pytest.mark.parametrize("picture", PICTURES, ids=[p.name for p in PICTURES])
def test_every_picture_is_drawn_by_a_script_and_linked_from_a_page(picture):
    scripts = [s.name for s in (DOCS / "pictures").glob("*.py") if f'"{picture.name}"' in s.read_text("utf-8")]
    assert scripts, f"no script in docs/pictures draws {picture.name}"
    linking = [p.name for p in PAGES if f"pictures/{picture.name}" in p.read_text("utf-8")]
    assert linking, f"no page links docs/pictures/{picture.name}"


# ---------------------------------------------------------------------------- python examples


def python_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"```python\n(.*?)```", text, re.S):
            line = text[:match.start()].count("\n") + 1
            blocks.append((f"{path.relative_to(REPO_ROOT)}:{line}", match.group(1)))
    return blocks


BLOCKS = python_blocks()


def test_the_documentation_has_python_examples():
    assert len(BLOCKS) >= 8, [where for where, _ in BLOCKS]


def imported_names(tree: ast.AST) -> list[tuple[str, str | None]]:
    """(module, name) for every import in the block; name None for ``import module``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [(node.module or "", alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
    return found


def free_names(tree: ast.AST) -> set[str]:
    """Names a block reads that it neither imports nor defines (a flat approximation of
    scoping: a name defined anywhere in the block counts as defined)."""
    defined, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else defined).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
    return used - defined - set(dir(builtins))


@pytest.mark.parametrize("where, code", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_documented_python_uses_only_public_names_that_exist(where, code):
    tree = ast.parse(code, filename=where)
    for module, name in imported_names(tree):
        if module.split(".")[0] == "airflow_stateful_provider":
            public = module == ENGINE_PACKAGE or any(module == p or module.startswith(p + ".")
                                                     for p in PUBLIC_SUBPACKAGES)
            assert public, f"{where} imports from internal module {module}"
        imported = importlib.import_module(module)
        if name is not None:
            assert hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}"), \
                f"{where}: {module} has no {name}"
    assert not free_names(tree), f"{where} uses names it does not import or define: {sorted(free_names(tree))}"


@pytest.mark.parametrize("where, code", [(w, c) for w, c in BLOCKS if not any(a in c for a in BROKER_ADDRESSES)],
                         ids=[w for w, c in BLOCKS if not any(a in c for a in BROKER_ADDRESSES)])
def test_documented_python_without_a_broker_runs_as_written(where, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, where, "exec"), {"__name__": "__doc_example__"})
