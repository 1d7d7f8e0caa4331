"""The one public import path, and the Python examples of README.md and docs/ that use it.

- ``airflow_stateful_provider.streams`` exports (``__all__``) everything a topology is
  written, run, tested and watched with, and importing it loads neither Airflow nor Spark.
- Every ``python`` code block in README.md and docs/ imports this package only from its
  public paths (the engine's package, the Airflow subpackages, the shipped examples), every
  name it imports exists, and every name it uses is imported or defined in the block.
- Blocks that need no broker run as written (their own asserts are part of the check);
  blocks naming a broker address (``broker:9092``, ``localhost:9092``) are checked as above.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_stateful_provider.streams as streams

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
#: The engine is imported from its package only; the Airflow surface (by module, as Airflow's
#: provider conventions have it) and the shipped examples from anywhere below theirs.
ENGINE_PACKAGE = "airflow_stateful_provider.streams"
PUBLIC_SUBPACKAGES = tuple(f"airflow_stateful_provider.{name}" for name in
                           ("hooks", "operators", "sensors", "triggers", "examples"))
BROKER_ADDRESSES = ("broker:9092", "localhost:9092")


def test_the_names_a_user_writes_a_topology_with_are_exported():
    wanted = {"StreamsBuilder", "Topology", "KafkaStreams", "KafkaStreamsState", "StreamsConfig", "Stores",
              "Materialized", "Consumed", "Produced", "Grouped", "Joined", "SessionWindows", "EmitStrategy",
              "Processor", "ProcessorContext", "Record", "PunctuationType", "TopologyTestDriver",
              "StateRestoreListener", "StandbyUpdateListener", "Serdes", "Serde", "fetch_application_status",
              "read_status_documents", "ApplicationStatus", "RestorationProgress", "render_status_table"}
    assert wanted <= set(streams.__all__)
    assert len(streams.__all__) == len(set(streams.__all__))
    for name in streams.__all__:
        assert getattr(streams, name) is not None, name
    assert streams.KafkaStreams.State is streams.KafkaStreamsState


def test_star_import_gives_exactly_all():
    namespace: dict = {}
    exec("from airflow_stateful_provider.streams import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(streams.__all__)


def test_the_engine_package_loads_neither_airflow_nor_spark():
    probe = ("import sys, airflow_stateful_provider.streams; "
             "print(sorted(m for m in ('airflow', 'pyspark') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# ---------------------------------------------------------------------------- documentation


def python_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for number, match in enumerate(re.finditer(r"```python\n(.*?)```", text, re.S)):
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
