"""The engine's layers, as docs/architecture.md draws them, checked against its imports.

Every import counts: module level, inside functions and under ``TYPE_CHECKING``. A
package may import only the packages below it; the modules readers load in Airflow
(the status document and snapshot, the control commands) stay free of Kafka clients and
of the Kafka door (``kafka/``); and no module imports itself back through others.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ENGINE = pathlib.Path(__file__).resolve().parents[2] / "airflow_stateful_provider" / "streams"
PREFIX = "airflow_stateful_provider.streams"

#: Small modules every layer may use: errors, durations, task ids, serdes, the Processor API,
#: session windows, topic-name rules, the wall clock, topic partitions.
FOUNDATION = {"errors", "durations", "task_id", "serdes", "processor", "windows", "topic_names", "clock",
              "topic_partition", "process_logging"}

#: Each engine package (or top-level module) and the packages it may import besides itself
#: and FOUNDATION: from the ground up, the order docs/architecture.md draws. ``kafka`` is the
#: door to kafka-python (client construction and settings, and every use of its internals,
#: tests/unit/test_kafka_door.py): the packages that talk to Kafka import it; the stores, the
#: topology, the DSL and the snapshots know nothing of Kafka clients.
MAY_IMPORT: dict[str, set[str]] = {
    "kafka": set(),
    "state": set(),
    "snapshots": {"state"},
    "topology": {"state"},
    "assignment": {"topology", "kafka"},
    "config": {"assignment", "kafka", "state"},
    "dsl": {"topology", "state"},
    "processing": {"config", "topology", "state", "snapshots", "kafka"},
    "restoration": {"processing", "state", "topology", "snapshots", "kafka"},
    "topics": {"topology", "state", "kafka"},
    "status": {"topics", "topology", "kafka"},
    "control": {"status", "processing", "topology", "topics", "state", "kafka"},
    "queries": {"status", "processing", "config", "topics", "topology", "state", "kafka"},
    "redeploy": {"status", "topics", "config", "topology", "state", "kafka"},
    "reset": {"redeploy", "queries", "status", "topics", "kafka"},
    "instance": {"redeploy", "queries", "control", "status", "topics", "restoration", "processing", "assignment",
                 "config", "topology", "state", "snapshots", "kafka"},
    "testing": {"processing", "config", "topology", "state"},
    "runner": {"instance", "config", "topology"},
}

#: Inside state/: common/ holds what every store kind shares; each other folder is one store
#: kind (docs/architecture.md, "How to add a store kind").
STATE_COMMON = "state.common"
STATE_KINDS = sorted(p.name for p in (ENGINE / "state").iterdir()
                     if (p / "__init__.py").exists() and p.name != "common")
#: The packages that choose a store kind: the DSL (what Materialized asks for) and topology
#: (the Stores factory). The runtime builds every kind through its builder (state.common).
NAME_STORE_KINDS = {"dsl", "topology"}

#: Loaded by Airflow sensors, triggers and the CLI to read and render: no Kafka client.
PURE_MODULES = ("status.document", "status.application", "status.rendering", "status.readable", "status.conditions",
                "status.health",
                "control.commands")


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ENGINE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (absolute names)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # ``from package import module`` imports the module too.
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


MODULES = {_module_name(p): _imports(p) for p in sorted(ENGINE.rglob("*.py"))}


def _engine_imports(module: str) -> set[str]:
    """The engine modules ``module`` imports (relative to the engine package)."""
    return {name[len(PREFIX) + 1:] for name in MODULES[module]
            if name.startswith(PREFIX + ".") and name[len(PREFIX) + 1:] in MODULES}


def _top(module: str) -> str:
    return module.split(".")[0]


def test_every_engine_package_has_a_place_in_the_layers():
    tops = {_top(m) for m in MODULES if m}
    assert tops - FOUNDATION - set(MAY_IMPORT) == set(), "add new packages to MAY_IMPORT (and the architecture doc)"


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_a_package_imports_only_the_layers_below_it(package):
    allowed = MAY_IMPORT[package] | FOUNDATION | {package}
    wrong = sorted(f"{module} -> {target}" for module in MODULES if _top(module) == package
                   for target in _engine_imports(module) if _top(target) not in allowed)
    assert wrong == []


def test_the_foundation_imports_nothing_above_it():
    wrong = sorted(f"{module} -> {target}" for module in MODULES if _top(module) in FOUNDATION
                   for target in _engine_imports(module) if _top(target) not in FOUNDATION)
    assert wrong == []


def test_no_module_imports_itself_back():
    graph = {module: _engine_imports(module) - {""} for module in MODULES if module}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_engine_never_imports_airflow_or_spark():
    wrong = sorted(f"{module} -> {name}" for module, names in MODULES.items() for name in names
                   if name.split(".")[0] in ("airflow", "pyspark"))
    assert wrong == []


@pytest.mark.parametrize("module", PURE_MODULES)
def test_what_readers_load_needs_no_kafka_client(module):
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        assert not any(name.split(".")[0] in ("kafka", "rocksdict") for name in MODULES[current]), current
        assert _top(current) != "kafka", f"{module} reaches the Kafka door through {current}"
        todo += _engine_imports(current)


def test_only_the_packages_that_talk_to_kafka_import_kafka_python():
    """kafka-python is imported by the door and the packages allowed to use it, nowhere else:
    the stores, the topology, the DSL, the snapshots and the foundation stay free of it."""
    talking = {"kafka"} | {package for package, allowed in MAY_IMPORT.items() if "kafka" in allowed}
    wrong = sorted(module for module, names in MODULES.items() if module and _top(module) not in talking
                   and any(name.split(".")[0] == "kafka" for name in names))
    assert wrong == []


def _state_area(module: str) -> str | None:
    """"state.common", "state.<kind>", "state" (the package face and its top modules), or None."""
    parts = module.split(".")
    if parts[0] != "state":
        return None
    if len(parts) > 1 and (ENGINE / "state" / parts[1]).is_dir():
        return f"state.{parts[1]}"
    return "state"


def test_the_store_kinds_are_the_folders_of_state_besides_common():
    assert {"keyvalue", "session", "versioned"} <= set(STATE_KINDS)


def test_what_the_store_kinds_share_imports_no_kind():
    wrong = sorted(f"{module} -> {target}" for module in MODULES if _state_area(module) == STATE_COMMON
                   for target in _engine_imports(module)
                   if _top(target) == "state" and _state_area(target) != STATE_COMMON)
    assert wrong == []


@pytest.mark.parametrize("kind", STATE_KINDS)
def test_a_store_kind_imports_only_its_folder_and_what_kinds_share(kind):
    own = f"state.{kind}"
    wrong = sorted(f"{module} -> {target}" for module in MODULES if _state_area(module) == own
                   for target in _engine_imports(module)
                   if _top(target) == "state" and _state_area(target) not in (own, STATE_COMMON))
    assert wrong == []


def test_only_the_dsl_and_topology_name_a_store_kind():
    """The runtime (processing, restoration, snapshots, control, instance, ...) reaches stores
    through their builders and what kinds share: no kind is named outside its folder but where
    one is chosen."""
    wrong = sorted(f"{module} -> {target}" for module in MODULES if _top(module) not in NAME_STORE_KINDS | {"state", ""}
                   for target in _engine_imports(module) if _state_area(target) in {f"state.{k}" for k in STATE_KINDS})
    assert wrong == []


def test_every_store_kind_folder_is_registered_by_the_state_package():
    """Each kind folder's kind.py registers its StoreKind, its __init__.py imports kind.py, and
    the state package imports every folder: importing any state module registers them all."""
    import importlib

    from airflow_stateful_provider.streams.state import StoreKind, store_kinds

    for kind in STATE_KINDS:
        module = importlib.import_module(f"{PREFIX}.state.{kind}.kind")
        declared = [value for value in vars(module).values() if isinstance(value, StoreKind)]
        assert len(declared) == 1 and declared[0] in store_kinds(), f"state/{kind}/kind.py must register one kind"
        assert f"state.{kind}.kind" in _engine_imports(f"state.{kind}"), f"state/{kind}/__init__.py must import kind.py"
        assert f"state.{kind}" in _engine_imports("state"), f"state/__init__.py must import state/{kind}/"
