"""No kafka-python internals outside the Kafka door, ``airflow_stateful_provider/streams/kafka/``.

kafka-python's public API, for this rule, is what it documents for users: the names its
top-level package exports (``kafka.__all__``: the three clients, TopicPartition,
OffsetAndMetadata, the rebalance listeners, serializers, ...) and the public names of the
modules its clients' documentation names: ``kafka.admin``, ``kafka.errors``,
``kafka.structs`` and ``kafka.partitioner``. Everything else is internal. Outside the door,
no module of the provider may:

1. import another kafka-python module (``kafka.consumer.fetcher``, ``kafka.coordinator...``,
   ``kafka.protocol...``, ``kafka.net...``, ``kafka.record...``), a name starting with
   ``_``, or from ``kafka`` itself a name it does not export;
2. use a private attribute of another object, ``obj._name`` or ``getattr(obj, "_name")``
   (``hasattr``, ``setattr``, ``delattr`` too), where ``_name`` is a name kafka-python's
   source uses privately and the provider does not define itself: a static check cannot
   tell whose object ``obj`` is, so a name the provider's own classes define (``self._name
   = ...``, a method, a class attribute) counts as theirs. The internals of kafka-python's
   client objects that the door exists for (``_coordinator``, ``_fetcher``,
   ``_subscription``, ...) count whatever else defines them;
3. subclass a kafka-python class and touch, on ``self``, ``cls`` or ``super()``, a private
   name of its kafka-python bases (reading or overriding their internals).

Inside the door, every top-level function or class that does one of these says in its
docstring which kafka-python version it was checked against (an import at module level:
the module docstring says it).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import pathlib
import textwrap

import kafka
import pytest

PROVIDER = pathlib.Path(__file__).resolve().parents[4] / "airflow_stateful_provider"
DOOR = PROVIDER / "streams" / "kafka"
CHECKED_AGAINST = "kafka-python 3.0.12"

PUBLIC_MODULES = frozenset({"kafka", "kafka.admin", "kafka.errors", "kafka.structs", "kafka.partitioner"})
#: Internals of KafkaConsumer and KafkaProducer (and of their coordinator, fetcher and sender).
CLIENT_INTERNALS = frozenset({"_coordinator", "_fetcher", "_subscription", "_client", "_metadata", "_sender",
                              "_transaction_manager", "_accumulator", "_manager", "_net"})
ATTRIBUTE_FUNCTIONS = ("getattr", "hasattr", "setattr", "delattr")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own(node: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: the object whose class is being written."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _class_members(tree: ast.AST) -> set[str]:
    """Private names classes in ``tree`` define: ``self._x = ...``, methods, class attributes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _own(node.value):
            names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(statement.name)
                elif isinstance(statement, ast.Assign):
                    names.update(t.id for t in statement.targets if isinstance(t, ast.Name))
                elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    names.add(statement.target.id)
    return {name for name in names if _private(name)}


@functools.cache
def kafka_private_names() -> frozenset[str]:
    """Every private attribute, method or class name in the installed kafka-python's source."""
    names: set[str] = set()
    root = pathlib.Path(kafka.__file__).parent
    for path in root.rglob("*.py"):
        if {"vendor", "benchmarks"} & set(path.relative_to(root).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
    return frozenset(name for name in names if _private(name))


def _provider_files() -> list[pathlib.Path]:
    return sorted(path for path in PROVIDER.rglob("*.py") if DOOR not in path.parents)


@functools.cache
def provider_private_names() -> frozenset[str]:
    """Private names the provider's own classes define, outside the door."""
    names: set[str] = set()
    for path in _provider_files():
        names |= _class_members(ast.parse(path.read_text(), str(path)))
    return frozenset(names)


def _public_import(module: str, name: str) -> bool:
    if module not in PUBLIC_MODULES or _private(name):
        return False
    if module == "kafka":
        return name in kafka.__all__ or name == "__version__"
    # any public name of a public module, but not one of its submodules unless public itself
    submodule = f"{module}.{name}"
    is_package = hasattr(importlib.import_module(module), "__path__")
    return submodule in PUBLIC_MODULES or not is_package or importlib.util.find_spec(submodule) is None


def _resolve(base: ast.expr, imported: dict[str, tuple[str, str]]) -> type | None:
    """The class a base-class expression names, when it comes from an import of the module."""
    if not isinstance(base, ast.Name) or base.id not in imported:
        return None
    module, name = imported[base.id]
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return found if isinstance(found, type) else None


@functools.cache
def _kafka_base_private_names(klass: type) -> frozenset[str]:
    """Private names the kafka-python classes among ``klass``'s bases define or use on self."""
    names: set[str] = set()
    for base in klass.__mro__:
        if base.__module__.split(".")[0] != "kafka":
            continue
        names.update(name for name in vars(base) if _private(name))
        tree = ast.parse(textwrap.dedent(inspect.getsource(base)))
        names |= _class_members(tree)
        names.update(node.attr for node in ast.walk(tree)
                     if isinstance(node, ast.Attribute) and _own(node.value) and _private(node.attr))
    return frozenset(names)


def kafka_internals_used(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """Each use of a kafka-python internal in ``source`` (rules 1-3 of the module docstring),
    as (line, what)."""
    tree = ast.parse(source, filename)
    foreign = (kafka_private_names() - provider_private_names() - _class_members(tree)) | CLIENT_INTERNALS
    imported: dict[str, tuple[str, str]] = {}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module, alias.name)
                if node.module.split(".")[0] == "kafka" and not _public_import(node.module, alias.name):
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {alias.name}") for alias in node.names
                      if alias.name.split(".")[0] == "kafka" and alias.name not in PUBLIC_MODULES]
        elif isinstance(node, ast.Attribute) and node.attr in foreign and not _own(node.value):
            found.append((node.lineno, f"{ast.unparse(node.value)}.{node.attr}"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_FUNCTIONS
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and node.args[1].value in foreign and not _own(node.args[0])):
            found.append((node.lineno, f"{node.func.id}({ast.unparse(node.args[0])}, {node.args[1].value!r})"))
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        bases = [_resolve(base, imported) for base in cls.bases]
        inherited = frozenset().union(*(_kafka_base_private_names(b) for b in bases if b is not None))
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and _own(node.value) and node.attr in inherited:
                found.append((node.lineno, f"{cls.name}: {ast.unparse(node)} of its kafka-python base"))
        found += [(node.lineno, f"{cls.name} overrides {node.name} of its kafka-python base") for node in cls.body
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in inherited]
    return sorted(set(found))


def test_no_kafka_python_internals_outside_the_door():
    found = [f"{path.relative_to(PROVIDER.parent)}:{line}: {what}" for path in _provider_files()
             for line, what in kafka_internals_used(path.read_text(), str(path))]
    assert found == [], "move these into airflow_stateful_provider/streams/kafka/ (see this test's docstring)"


@pytest.mark.parametrize("path", sorted(DOOR.glob("*.py")), ids=lambda path: path.name)
def test_each_use_inside_the_door_names_the_version_it_was_checked_against(path):
    tree = ast.parse(path.read_text(), str(path))
    unchecked = set()
    for line, what in kafka_internals_used(path.read_text(), str(path)):
        owner = next((node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                      and node.lineno <= line <= node.end_lineno), tree)
        if CHECKED_AGAINST not in " ".join((ast.get_docstring(owner) or "").split()):
            unchecked.add(f"{getattr(owner, 'name', 'module docstring')} ({what})")
    assert sorted(unchecked) == []


def test_the_door_is_where_the_engine_uses_kafka_python_internals():
    """The rule finds the uses the door holds: were it blind, the test above would pass for nothing."""
    found = {path.name: kafka_internals_used(path.read_text()) for path in DOOR.glob("*.py")}
    assert {name for name, uses in found.items() if uses} == {
        "assignor_api.py", "batch_decoding.py", "batch_encoding.py", "batched_send.py", "client_settings.py",
        "connection_delay.py", "failed_metadata_refresh.py", "group_join.py", "heartbeat_in_flight.py",
        "list_offsets.py", "net_client.py", "metadata_requests.py",
        "oauth_tokens.py", "parked_fetches.py", "positions.py", "producer_close.py", "response_classes.py",
        "socket_reads.py",
        "transactional_calls.py"}


@pytest.mark.parametrize("source", [
    "consumer._coordinator.request_rejoin()",
    "state = consumer._subscription.assignment",
    "getattr(consumer, '_fetcher', None)",
    "hasattr(producer, '_transaction_manager')",
    "batch._maybe_uncompress()",
    "from kafka.consumer.fetcher import ConsumerRecord",
    "from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment",
    "import kafka.record.util",
    "from kafka.errors import _raise_if_closed",
    "from kafka import consumer",
    "from kafka import KafkaConsumer\n"
    "class Quiet(KafkaConsumer):\n"
    "    def coordinator(self):\n"
    "        return self._coordinator\n",
    "from kafka import KafkaConsumer\n"
    "class Quiet(KafkaConsumer):\n"
    "    def _poll_once(self, timer, max_records, update_offsets=True):\n"
    "        return {}\n",
])
def test_the_rule_finds_each_kind_of_internal_use(source):
    assert kafka_internals_used(source) != []


@pytest.mark.parametrize("source", [
    "from kafka import KafkaConsumer, TopicPartition, AsyncConsumerRebalanceListener",
    "from kafka.errors import KafkaError\nfrom kafka.structs import OffsetAndMetadata",
    "from kafka.admin import NewTopic, ConfigResource\nfrom kafka.partitioner import murmur2",
    "import kafka\nimport kafka.errors",
    # the provider's own private names, on itself and on its own objects
    "class Buffer:\n"
    "    def __init__(self):\n"
    "        self._maybe_uncompress = True\n"
    "def ready(buffer):\n"
    "    return buffer._maybe_uncompress\n",
    "class Owner:\n"
    "    def __init__(self, client):\n"
    "        self._client = client\n"
    "    def close(self):\n"
    "        self._client.close()\n",
    "from kafka import AsyncConsumerRebalanceListener\n"
    "class Listener(AsyncConsumerRebalanceListener):\n"
    "    def __init__(self, thread):\n"
    "        self._thread = thread\n",
])
def test_the_rule_leaves_public_api_and_own_names_alone(source):
    assert kafka_internals_used(source) == []
