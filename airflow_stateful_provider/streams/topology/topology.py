"""Topology: the graph of sources, processors, sinks and state stores.

A :class:`Topology` is a description; nothing runs until a task instantiates it.
It is split into *subtopologies* (:mod:`.subtopologies`), the units that become tasks; its
nodes are specs (:mod:`.nodes`).

Internal topics (repartition topics created by the DSL) are named here without
the application id; they become ``<application_id>-<name>`` when the application
id is known (:meth:`Topology.decorate_topic`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.processor import Processor, ProcessorSupplier
from airflow_stateful_provider.streams.serdes import check_serde
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topology.description import TopologyDescription
from airflow_stateful_provider.streams.topology.nodes import (
    NODE_NAME,
    NodeSpec,
    ProcessorNodeSpec,
    SinkNodeSpec,
    SourceNodeSpec,
    TopicNameExtractor,
    check_topic,
    node_kind,
)
from airflow_stateful_provider.streams.topology.subtopologies import Subtopology, compute_subtopologies

__all__ = ["StoreBuilder", "Topology"]


@runtime_checkable
class StoreBuilder(Protocol):
    """What the topology needs to know about a store; built per task by the runtime.

    ``name`` must be unique in the topology. The runtime uses ``logging_enabled`` and
    ``log_config`` (plus the store's type and retention) to create its changelog topic.
    """

    @property
    def name(self) -> str: ...


class Topology:
    """A processing graph built with ``add_source`` / ``add_processor`` / ``add_sink`` /
    ``add_state_store`` (or by :class:`~airflow_stateful_provider.streams.dsl.builder.StreamsBuilder`).

    Parents must be added before their children, so the graph of nodes can never
    contain a cycle; every method raises :class:`TopologyError` naming the bad value
    (:class:`ConfigError` for a serde that is neither a serde object nor a built-in name).
    """

    def __init__(self) -> None:
        self._nodes: dict[str, NodeSpec] = {}
        self._children: dict[str, list[str]] = {}
        self._topic_to_source: dict[str, str] = {}
        self._stores: dict[str, Any] = {}
        self._store_users: dict[str, list[str]] = {}
        self._node_stores: dict[str, list[str]] = {}
        self._internal_topics: dict[str, str] = {}  # raw name -> kind ("repartition")
        self._copartition_groups: list[frozenset[str]] = []
        self._subtopologies: list[Subtopology] | None = None

    # ------------------------------------------------------------------ building

    def add_source(
        self,
        name: str,
        *topics: str,
        key_serde: Any = None,
        value_serde: Any = None,
    ) -> Topology:
        """A source node reading ``topics`` (each topic may be read by one source only)."""
        self._check_new_name(name)
        if not topics:
            raise TopologyError(f"source {name!r} must read at least one topic")
        for topic in topics:
            check_topic(topic, f"source {name!r}")
            if topic in self._topic_to_source:
                raise TopologyError(
                    f"topic {topic!r} of source {name!r} is already read by source "
                    f"{self._topic_to_source[topic]!r}"
                )
        if len(set(topics)) != len(topics):
            raise TopologyError(f"source {name!r} lists a topic twice: {list(topics)}")
        _check_serdes(f"source {name!r}", key_serde, value_serde)
        for topic in topics:
            self._topic_to_source[topic] = name
        self._add(SourceNodeSpec(name, tuple(topics), key_serde, value_serde))
        return self

    def add_processor(self, name: str, supplier: ProcessorSupplier, *parent_names: str) -> Topology:
        """A processor node; ``supplier()`` must return a new Processor for every task."""
        self._check_new_name(name)
        if isinstance(supplier, Processor) or not callable(supplier):
            raise TopologyError(
                f"processor {name!r} needs a supplier (a callable returning a new Processor "
                f"per task), got {supplier!r}"
            )
        self._check_parents(name, parent_names, kind="processor")
        self._add(ProcessorNodeSpec(name, supplier, tuple(parent_names)))
        return self

    def add_sink(
        self,
        name: str,
        topic: str | TopicNameExtractor,
        *parent_names: str,
        key_serde: Any = None,
        value_serde: Any = None,
        partitioner: Callable[..., int | None] | None = None,
    ) -> Topology:
        """A sink node writing to ``topic`` (or to the topic a TopicNameExtractor picks)."""
        self._check_new_name(name)
        if isinstance(topic, str):
            check_topic(topic, f"sink {name!r}")
        elif not callable(topic):
            raise TopologyError(
                f"sink {name!r} topic must be a topic name or a TopicNameExtractor, got {topic!r}"
            )
        self._check_parents(name, parent_names, kind="sink")
        _check_serdes(f"sink {name!r}", key_serde, value_serde)
        self._add(SinkNodeSpec(name, topic, tuple(parent_names), key_serde, value_serde, partitioner))
        return self

    def add_state_store(self, store_builder: StoreBuilder, *processor_names: str) -> Topology:
        """Register a store and connect it to ``processor_names`` (more can be connected
        later with :meth:`connect_processor_and_state_stores`)."""
        store_name = getattr(store_builder, "name", None)
        if not isinstance(store_name, str) or not store_name:
            raise TopologyError(f"store builder {store_builder!r} has no name")
        if store_name in self._stores:
            raise TopologyError(f"state store {store_name!r} is already added")
        _check_serdes(f"state store {store_name!r}", getattr(store_builder, "key_serde", None),
                      getattr(store_builder, "value_serde", None))
        self._stores[store_name] = store_builder
        self._store_users[store_name] = []
        self._invalidate()
        for processor in processor_names:
            self.connect_processor_and_state_stores(processor, store_name)
        return self

    def connect_processor_and_state_stores(self, processor_name: str, *store_names: str) -> Topology:
        """Give ``processor_name`` access to already added stores."""
        node = self._nodes.get(processor_name)
        if node is None:
            raise TopologyError(
                f"cannot connect stores {list(store_names)} to unknown processor {processor_name!r}"
            )
        if not isinstance(node, ProcessorNodeSpec):
            raise TopologyError(
                f"stores can only be connected to processors; {processor_name!r} is a "
                f"{node_kind(node)}"
            )
        for store in store_names:
            if store not in self._stores:
                raise TopologyError(
                    f"cannot connect unknown state store {store!r} to processor {processor_name!r}"
                )
            users = self._store_users[store]
            if processor_name not in users:
                users.append(processor_name)
                self._node_stores.setdefault(processor_name, []).append(store)
        self._invalidate()
        return self

    def add_internal_topic(self, name: str, kind: str = "repartition") -> Topology:
        """Mark ``name`` as an internal topic, owned by the application (created by the
        runtime as ``<application_id>-<name>``)."""
        check_topic(name, "internal topic")
        self._internal_topics[name] = kind
        self._invalidate()
        return self

    def copartition(self, *topics: str) -> Topology:
        """Declare topics that must have equal partition counts (e.g. both sides of a join)."""
        self._copartition_groups.append(frozenset(topics))
        return self

    # ------------------------------------------------------------------ queries

    @property
    def node_names(self) -> list[str]:
        return list(self._nodes)

    def node(self, name: str) -> NodeSpec:
        try:
            return self._nodes[name]
        except KeyError:
            raise TopologyError(f"unknown node {name!r}") from None

    def children(self, name: str) -> list[str]:
        return list(self._children.get(name, ()))

    def stores_of(self, processor_name: str) -> list[str]:
        return list(self._node_stores.get(processor_name, ()))

    def store_builder(self, store_name: str) -> Any:
        try:
            return self._stores[store_name]
        except KeyError:
            raise TopologyError(f"unknown state store {store_name!r}") from None

    @property
    def store_names(self) -> list[str]:
        return list(self._stores)

    @property
    def internal_topics(self) -> dict[str, str]:
        """Raw internal topic name -> kind."""
        return dict(self._internal_topics)

    def is_internal_topic(self, raw_name: str) -> bool:
        return raw_name in self._internal_topics

    def decorate_topic(self, raw_name: str, application_id: str) -> str:
        """The real topic name: internal topics get the application id prefix."""
        if raw_name in self._internal_topics:
            return f"{application_id}-{raw_name}"
        return raw_name

    def source_topics(self) -> list[str]:
        """Raw names of every topic read by the topology."""
        return list(self._topic_to_source)

    def sink_topics(self) -> list[str]:
        """Raw names of the fixed topics sinks write to (not repartition topics, not topics a
        sink's topic name extractor picks per record)."""
        return sorted({node.topic for node in self._nodes.values()
                       if isinstance(node, SinkNodeSpec) and isinstance(node.topic, str)
                       and node.topic not in self._internal_topics})

    def source_node_for_topic(self, raw_topic: str) -> str | None:
        return self._topic_to_source.get(raw_topic)

    def validate(self) -> None:
        """Whole-topology checks that cannot be done while adding (raises TopologyError)."""
        if not self._nodes:
            raise TopologyError("topology is empty: add at least one source")
        for store, users in self._store_users.items():
            if not users:
                raise TopologyError(
                    f"state store {store!r} is not connected to any processor; connect it with "
                    f"add_state_store(builder, processor) or connect_processor_and_state_stores"
                )
        for topic in self._internal_topics:
            if topic not in self._topic_to_source:
                raise TopologyError(f"internal topic {topic!r} is read by no source")
        self._check_acyclic()

    def subtopologies(self) -> list[Subtopology]:
        """The connected components, numbered like Kafka Streams (by first added node)."""
        if self._subtopologies is None:
            self.validate()
            self._subtopologies = compute_subtopologies(self._nodes, self._store_users, self._node_stores,
                                                        self._internal_topics)
        return list(self._subtopologies)

    def subtopology(self, subtopology_id: int) -> Subtopology:
        subs = self.subtopologies()
        if not 0 <= subtopology_id < len(subs):
            raise TopologyError(
                f"unknown subtopology {subtopology_id}; this topology has {len(subs)}"
            )
        return subs[subtopology_id]

    def subtopology_of_topic(self, raw_topic: str) -> Subtopology | None:
        for sub in self.subtopologies():
            if raw_topic in sub.source_topics:
                return sub
        return None

    def resolve_partition_counts(
        self, partition_counts: Mapping[str, int], application_id: str
    ) -> dict[str, int]:
        """Partition counts of every source topic (decorated names), deriving missing
        repartition topics from their writers (the max of the writing subtopology's
        partitions), as Kafka Streams does. Raises for an unknown external topic."""
        subs = self.subtopologies()
        counts: dict[str, int] = {}
        for sub in subs:
            for raw in sub.source_topics:
                real = self.decorate_topic(raw, application_id)
                if real in partition_counts:
                    n = partition_counts[real]
                    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                        raise TopologyError(f"partition count of topic {real!r} must be >= 1, got {n!r}")
                    counts[real] = n
                elif not self.is_internal_topic(raw):
                    raise TopologyError(
                        f"source topic {real!r} of subtopology {sub.id} does not exist "
                        f"(no partition count known for it)"
                    )
        changed = True
        while changed:
            changed = False
            for sub in subs:
                for raw in sub.repartition_source_topics:
                    real = self.decorate_topic(raw, application_id)
                    if real in counts:
                        continue
                    writers = [
                        w for w in subs if raw in w.sink_topics and w.id != sub.id
                    ]
                    known = [
                        counts[self.decorate_topic(t, application_id)]
                        for w in writers
                        for t in w.source_topics
                        if self.decorate_topic(t, application_id) in counts
                    ]
                    if known:
                        counts[real] = max(known)
                        changed = True
        for sub in subs:
            for raw in sub.source_topics:
                real = self.decorate_topic(raw, application_id)
                if real not in counts:
                    raise TopologyError(
                        f"cannot derive the partition count of internal topic {real!r}"
                    )
        return counts

    def validate_partition_counts(
        self, partition_counts: Mapping[str, int], application_id: str
    ) -> dict[int, int]:
        """Check co-partitioning at start: every source topic of a subtopology (and every
        declared co-partition group) must have the same partition count. Returns the number
        of tasks (partitions) per subtopology id."""
        counts = self.resolve_partition_counts(partition_counts, application_id)
        tasks: dict[int, int] = {}
        for sub in self.subtopologies():
            per_topic = {self.decorate_topic(t, application_id): 0 for t in sub.source_topics}
            for real in per_topic:
                per_topic[real] = counts[real]
            distinct = set(per_topic.values())
            if len(distinct) != 1:
                raise TopologyError(
                    f"source topics of subtopology {sub.id} must be co-partitioned (equal "
                    f"partition counts), got {per_topic}"
                )
            tasks[sub.id] = distinct.pop()
        for group in self._copartition_groups:
            in_group = {
                self.decorate_topic(t, application_id): counts.get(self.decorate_topic(t, application_id))
                for t in sorted(group)
            }
            if len({n for n in in_group.values() if n is not None}) > 1:
                raise TopologyError(
                    f"topics {sorted(in_group)} must be co-partitioned (equal partition "
                    f"counts), got {in_group}"
                )
        return tasks

    def task_ids(self, partition_counts: Mapping[str, int], application_id: str) -> list[TaskId]:
        """Every task of the application given the partition counts of its source topics."""
        per_sub = self.validate_partition_counts(partition_counts, application_id)
        return [TaskId(s, p) for s, n in sorted(per_sub.items()) for p in range(n)]

    def describe(self) -> TopologyDescription:
        """A readable description; ``print(topology.describe())``."""
        return TopologyDescription(self.subtopologies(), self._nodes, self._children,
                                   {name: self.stores_of(name) for name in self._nodes})

    def __str__(self) -> str:
        return str(self.describe())

    # ------------------------------------------------------------------ internals

    def _add(self, node: NodeSpec) -> None:
        self._nodes[node.name] = node
        self._children[node.name] = []
        for parent in node.parents:
            self._children[parent].append(node.name)
        self._invalidate()

    def _invalidate(self) -> None:
        self._subtopologies = None

    def _check_new_name(self, name: str) -> None:
        if not isinstance(name, str) or not name or not NODE_NAME.match(name):
            raise TopologyError(f"node name must be a non-empty string without spaces, got {name!r}")
        if name in self._nodes:
            raise TopologyError(
                f"node name {name!r} is already used by a {node_kind(self._nodes[name])}"
            )

    def _check_parents(self, name: str, parents: Sequence[str], *, kind: str) -> None:
        if not parents:
            raise TopologyError(f"{kind} {name!r} must have at least one parent")
        if len(set(parents)) != len(parents):
            raise TopologyError(f"{kind} {name!r} lists a parent twice: {list(parents)}")
        for parent in parents:
            if parent == name:
                raise TopologyError(f"{kind} {name!r} cannot be its own parent (cycle)")
            node = self._nodes.get(parent)
            if node is None:
                raise TopologyError(
                    f"{kind} {name!r} names unknown parent {parent!r}; parents must be added "
                    f"first (known nodes: {sorted(self._nodes)})"
                )
            if isinstance(node, SinkNodeSpec):
                raise TopologyError(f"{kind} {name!r} cannot have sink {parent!r} as a parent")

    def _check_acyclic(self) -> None:
        # Parents are always added first, so this only guards against graphs edited
        # behind the API's back; it names one node of the cycle.
        state: dict[str, int] = {}

        def visit(start: str) -> None:
            stack = [(start, iter(self._children[start]))]
            state[start] = 1
            while stack:
                node, it = stack[-1]
                child = next(it, None)
                if child is None:
                    state[node] = 2
                    stack.pop()
                elif state.get(child) == 1:
                    raise TopologyError(f"topology has a cycle through node {child!r}")
                elif child not in state:
                    state[child] = 1
                    stack.append((child, iter(self._children[child])))

        for name in self._nodes:
            if name not in state:
                visit(name)


def _check_serdes(owner: str, key_serde: Any, value_serde: Any) -> None:
    """A serde given by name must be a built-in one ("avro" is refused now, not when a task
    first deserializes); None means the application's default."""
    check_serde(key_serde, f"{owner} key_serde")
    check_serde(value_serde, f"{owner} value_serde")
