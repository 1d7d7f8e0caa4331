"""The DSL: StreamsBuilder, KStream, KGroupedStream, SessionWindowedKStream, KTable.

A thin layer that writes a :class:`~airflow_stateful_provider.streams.topology.topology.Topology`
with generated node names (``KSTREAM-FILTER-0000000001``, as Kafka Streams names
them, so ``describe()`` output reads the same). Operations:

- ``builder.stream(topics)``, ``builder.table(topic, materialized=...)``
- ``KStream``: filter, filter_not, map_values, map, select_key, peek, foreach, to,
  process, group_by_key, group_by, join / left_join with a KTable
- ``KGroupedStream``: count, reduce, aggregate, windowed_by(SessionWindows)
- ``SessionWindowedKStream``: emit_strategy, count, reduce, aggregate (SEMANTICS §4)
- ``KTable``: to_stream

A key change (map, select_key, group_by) followed by a stateful operation goes
through an internal repartition topic ``<application_id>-<name>-repartition``, which
starts a new subtopology, so records with equal keys meet in one task.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.processor import Processor, ProcessorSupplier, Record
from airflow_stateful_provider.streams.state.segments import session_segment_interval
from airflow_stateful_provider.streams.state.versioned import NOT_PUT, VALID_TO_UNDEFINED
from airflow_stateful_provider.streams.topology.store_builders import (
    KeyValueStoreBuilder,
    SessionStoreBuilder,
    StoreBuilder,
    Stores,
    VersionedKeyValueStoreBuilder,
)
from airflow_stateful_provider.streams.topology.topology import Topology
from airflow_stateful_provider.streams.windows import EmitStrategy, SessionWindow, SessionWindows, Windowed

__all__ = [
    "Change",
    "Consumed",
    "Grouped",
    "Joined",
    "KGroupedStream",
    "KStream",
    "KTable",
    "Materialized",
    "Produced",
    "SessionWindowedKStream",
    "Stores",
    "StreamsBuilder",
]

log = logging.getLogger(__name__)

#: The put result of a versioned store when the record was older than history retention
#: (Kafka's ``VersionedKeyValueStore.PUT_RETURN_CODE_NOT_PUT``), and when the new version
#: is the newest one.
PUT_RETURN_CODE_NOT_PUT = NOT_PUT
PUT_RETURN_CODE_VALID_TO_UNDEFINED = VALID_TO_UNDEFINED


# ---------------------------------------------------------------------- parameter objects


@dataclasses.dataclass(frozen=True)
class Consumed:
    """How a source reads: serdes (None = config defaults) and an optional node name."""

    key_serde: Any = None
    value_serde: Any = None
    name: str | None = None

    @classmethod
    def with_(cls, key_serde: Any = None, value_serde: Any = None) -> Consumed:
        return cls(key_serde, value_serde)

    @classmethod
    def as_(cls, name: str) -> Consumed:
        return cls(name=name)


@dataclasses.dataclass(frozen=True)
class Produced:
    """How a sink writes: serdes, partitioner ``(topic, key, value, n) -> partition``, name."""

    key_serde: Any = None
    value_serde: Any = None
    partitioner: Callable[..., int | None] | None = None
    name: str | None = None

    @classmethod
    def with_(cls, key_serde: Any = None, value_serde: Any = None) -> Produced:
        return cls(key_serde, value_serde)


@dataclasses.dataclass(frozen=True)
class Grouped:
    """Serdes for a grouping's repartition topic, and the name that topic is derived from."""

    key_serde: Any = None
    value_serde: Any = None
    name: str | None = None

    @classmethod
    def with_(cls, key_serde: Any = None, value_serde: Any = None) -> Grouped:
        return cls(key_serde, value_serde)

    @classmethod
    def as_(cls, name: str) -> Grouped:
        return cls(name=name)


@dataclasses.dataclass(frozen=True)
class Joined:
    """Serdes of a stream-table join (used if the stream must be repartitioned) and a name."""

    key_serde: Any = None
    value_serde: Any = None
    other_value_serde: Any = None
    name: str | None = None


@dataclasses.dataclass(frozen=True)
class Materialized:
    """How a table or aggregation stores its state.

    ``Materialized.as_("name")`` names the store (queryable from the test driver);
    ``Materialized.as_versioned("name", history_retention)`` makes a table versioned
    (SEMANTICS §5). ``store_type`` "rocksdb" or "in_memory" overrides the config's
    ``default_dsl_store``. ``retention`` applies to session stores (default gap + grace).
    """

    store_name: str | None = None
    key_serde: Any = None
    value_serde: Any = None
    store_type: str | None = None
    retention_ms: int | None = None
    versioned_history_retention_ms: int | None = None
    versioned_segment_interval_ms: int | None = None
    logging_enabled: bool = True
    #: DSL stores cache by default, as in Kafka Streams (state/caching.py).
    caching_enabled: bool = True
    log_config: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.store_type not in (None, "rocksdb", "in_memory"):
            raise TopologyError(f"Materialized store_type must be 'rocksdb' or 'in_memory', got {self.store_type!r}")

    @classmethod
    def as_(cls, store_name: str) -> Materialized:
        return cls(store_name=store_name)

    @classmethod
    def as_versioned(
        cls,
        store_name: str,
        history_retention: int | timedelta,
        segment_interval: int | timedelta | None = None,
    ) -> Materialized:
        return cls(
            store_name=store_name,
            versioned_history_retention_ms=duration_ms(history_retention, "history_retention", minimum=0),
            versioned_segment_interval_ms=(
                None if segment_interval is None else duration_ms(segment_interval, "segment_interval", minimum=1)
            ),
        )

    @classmethod
    def with_(cls, key_serde: Any = None, value_serde: Any = None) -> Materialized:
        return cls(key_serde=key_serde, value_serde=value_serde)

    def with_key_serde(self, serde: Any) -> Materialized:
        return dataclasses.replace(self, key_serde=serde)

    def with_value_serde(self, serde: Any) -> Materialized:
        return dataclasses.replace(self, value_serde=serde)

    def with_store_type(self, store_type: str) -> Materialized:
        return dataclasses.replace(self, store_type=store_type)

    def with_retention(self, retention: int | timedelta) -> Materialized:
        return dataclasses.replace(self, retention_ms=duration_ms(retention, "retention", minimum=1))

    def with_logging_disabled(self) -> Materialized:
        return dataclasses.replace(self, logging_enabled=False, log_config=())

    def with_caching_disabled(self) -> Materialized:
        """Forward every update at once instead of the latest per key at each commit."""
        return dataclasses.replace(self, caching_enabled=False)

    def with_caching_enabled(self) -> Materialized:
        return dataclasses.replace(self, caching_enabled=True)

    def with_logging_enabled(self, config: dict[str, str] | None = None) -> Materialized:
        return dataclasses.replace(
            self, logging_enabled=True, log_config=tuple((str(k), str(v)) for k, v in (config or {}).items())
        )

    @property
    def is_versioned(self) -> bool:
        return self.versioned_history_retention_ms is not None


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """What table processors pass each other: the new and the old value of a key, and
    whether the update is the key's newest version (False for an out-of-order put into a
    versioned table)."""

    new_value: Any
    old_value: Any = None
    is_latest: bool = True


# ---------------------------------------------------------------------- builder


class StreamsBuilder:
    """Entry point of the DSL; ``build()`` returns the Topology."""

    def __init__(self) -> None:
        self._topology = Topology()
        self._index = itertools.count()
        self._built = False
        self._pending_stores: dict[str, StoreBuilder] = {}

    # -- naming (as Kafka Streams: PREFIX-0000000003) --------------------------------
    def _new_name(self, prefix: str) -> str:
        return f"{prefix}{next(self._index):010d}"

    def _new_store_name(self, prefix: str) -> str:
        return f"{prefix}STATE-STORE-{next(self._index):010d}"

    def _check_not_built(self) -> None:
        if self._built:
            raise TopologyError("this StreamsBuilder was already built; create a new one")

    @property
    def topology(self) -> Topology:
        return self._topology

    def stream(self, topics: str | Sequence[str], consumed: Consumed | None = None) -> KStream:
        """A stream of the records of ``topics``."""
        self._check_not_built()
        consumed = consumed or Consumed()
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        name = consumed.name or self._new_name("KSTREAM-SOURCE-")
        self._topology.add_source(
            name, *topic_list, key_serde=consumed.key_serde, value_serde=consumed.value_serde
        )
        return KStream(self, name, key_serde=consumed.key_serde, value_serde=consumed.value_serde,
                       source_topics=frozenset(topic_list))

    def table(self, topic: str, consumed: Consumed | None = None, materialized: Materialized | None = None) -> KTable:
        """A table of the latest value per key of ``topic`` (a versioned table with
        ``Materialized.as_versioned``). Always materialized, so it can be joined."""
        self._check_not_built()
        consumed = consumed or Consumed()
        materialized = materialized or Materialized()
        source_name = consumed.name or self._new_name("KSTREAM-SOURCE-")
        key_serde = materialized.key_serde if materialized.key_serde is not None else consumed.key_serde
        value_serde = materialized.value_serde if materialized.value_serde is not None else consumed.value_serde
        self._topology.add_source(
            source_name, topic, key_serde=consumed.key_serde, value_serde=consumed.value_serde
        )
        table_name = self._new_name("KTABLE-SOURCE-")
        store_name = materialized.store_name or self._new_store_name(f"{topic}-")
        builder = _store_builder_for(materialized, store_name, key_serde, value_serde, kind="table")
        versioned = isinstance(builder, VersionedKeyValueStoreBuilder)
        self._topology.add_processor(
            table_name, lambda: _KTableSourceProcessor(store_name, versioned), source_name
        )
        self._topology.add_state_store(builder, table_name)
        return KTable(
            self, table_name, store_name=store_name, versioned=versioned, key_serde=key_serde,
            value_serde=value_serde, source_topics=frozenset([topic]),
        )

    def add_state_store(self, builder: StoreBuilder) -> StreamsBuilder:
        """Register a store for use by ``KStream.process(supplier, store_name)``."""
        self._check_not_built()
        self._pending_stores[builder.name] = builder
        return self

    def build(self) -> Topology:
        """The Topology. Stores added with :meth:`add_state_store` must be used by a processor."""
        self._check_not_built()
        for name in self._pending_stores:
            raise TopologyError(f"state store {name!r} was added to the builder but no processor uses it")
        self._built = True
        self._topology.validate()
        return self._topology


def _store_builder_for(
    materialized: Materialized, store_name: str, key_serde: Any, value_serde: Any, *, kind: str,
    session_retention_ms: int | None = None, windows: SessionWindows | None = None,
) -> StoreBuilder:
    persistent = None if materialized.store_type is None else materialized.store_type == "rocksdb"
    builder: StoreBuilder
    if kind == "session":
        assert windows is not None and session_retention_ms is not None
        builder = SessionStoreBuilder(
            store_name, key_serde, value_serde, True, retention_ms=session_retention_ms,
            inactivity_gap_ms=windows.inactivity_gap_ms, grace_period_ms=windows.grace_period_ms,
        )
    elif materialized.is_versioned:
        if kind != "table":
            raise TopologyError(
                f"store {store_name!r}: a versioned store can only materialize a source table "
                f"(builder.table), not an aggregation"
            )
        builder = VersionedKeyValueStoreBuilder(
            store_name, key_serde, value_serde, True,
            history_retention_ms=materialized.versioned_history_retention_ms or 0,
            segment_interval_ms=materialized.versioned_segment_interval_ms,
        )
    else:
        builder = KeyValueStoreBuilder(store_name, key_serde, value_serde, True)
    # None = follow StreamsConfig.default_dsl_store, decided when the task builds the store
    builder.persistent = persistent  # type: ignore[assignment]
    if materialized.logging_enabled:
        builder.with_logging_enabled(dict(materialized.log_config))
    else:
        builder.with_logging_disabled()
    builder.caching_enabled = materialized.caching_enabled
    return builder


# ---------------------------------------------------------------------- streams


class KStream:
    """A record stream. Every operation returns a new KStream (or table/grouping) and
    adds nodes to the builder's topology."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        *,
        key_changed: bool = False,
        key_serde: Any = None,
        value_serde: Any = None,
        source_topics: frozenset[str] = frozenset(),
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_changed = key_changed
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._source_topics = source_topics

    @property
    def node_name(self) -> str:
        return self._node

    def _child(self, prefix: str, supplier: ProcessorSupplier, name: str | None, *, key_changed: bool | None = None,
               key_serde: Any = ..., value_serde: Any = ...) -> KStream:
        self._builder._check_not_built()
        node = name or self._builder._new_name(prefix)
        self._builder.topology.add_processor(node, supplier, self._node)
        return KStream(
            self._builder,
            node,
            key_changed=self._key_changed if key_changed is None else key_changed,
            key_serde=self._key_serde if key_serde is ... else key_serde,
            value_serde=self._value_serde if value_serde is ... else value_serde,
            source_topics=self._source_topics,
        )

    def filter(self, predicate: Callable[[Any, Any], bool], name: str | None = None) -> KStream:
        """Keep records for which ``predicate(key, value)`` is true."""
        return self._child("KSTREAM-FILTER-", lambda: _FilterProcessor(predicate, False), name)

    def filter_not(self, predicate: Callable[[Any, Any], bool], name: str | None = None) -> KStream:
        """Drop records for which ``predicate(key, value)`` is true."""
        return self._child("KSTREAM-FILTER-", lambda: _FilterProcessor(predicate, True), name)

    def map_values(self, mapper: Callable[[Any], Any], name: str | None = None) -> KStream:
        """Replace each value with ``mapper(value)``; the key (and partitioning) is kept."""
        return self._child("KSTREAM-MAPVALUES-", lambda: _MapValuesProcessor(mapper), name, value_serde=None)

    def map(self, mapper: Callable[[Any, Any], tuple[Any, Any]], name: str | None = None) -> KStream:
        """Replace each record with ``mapper(key, value) -> (new_key, new_value)``; marks the
        stream for repartitioning before a stateful operation."""
        return self._child(
            "KSTREAM-MAP-", lambda: _MapProcessor(mapper), name, key_changed=True, key_serde=None, value_serde=None
        )

    def select_key(self, mapper: Callable[[Any, Any], Any], name: str | None = None) -> KStream:
        """Set each record's key to ``mapper(key, value)`` (repartitions before stateful ops)."""
        return self._child("KSTREAM-KEY-SELECT-", lambda: _SelectKeyProcessor(mapper), name,
                           key_changed=True, key_serde=None)

    def peek(self, action: Callable[[Any, Any], None], name: str | None = None) -> KStream:
        """Call ``action(key, value)`` for each record and pass it on unchanged."""
        return self._child("KSTREAM-PEEK-", lambda: _PeekProcessor(action, forward=True), name)

    def foreach(self, action: Callable[[Any, Any], None], name: str | None = None) -> None:
        """Terminal: call ``action(key, value)`` for each record."""
        self._child("KSTREAM-FOREACH-", lambda: _PeekProcessor(action, forward=False), name)

    def process(self, supplier: ProcessorSupplier, *store_names: str, name: str | None = None) -> KStream:
        """Run a hand-written Processor (it may forward); ``store_names`` are stores added
        with ``StreamsBuilder.add_state_store`` (or other DSL stores) it may use."""
        stream = self._child("KSTREAM-PROCESSOR-", supplier, name, key_changed=True, key_serde=None, value_serde=None)
        topology = self._builder.topology
        pending = self._builder._pending_stores
        for store in store_names:
            if store in pending:
                topology.add_state_store(pending.pop(store), stream._node)
            else:
                topology.connect_processor_and_state_stores(stream._node, store)
        return stream

    def to(self, topic: str | Callable[[Any, Any, Any], str], produced: Produced | None = None) -> None:
        """Write the stream to ``topic`` (or to the topic an extractor returns per record)."""
        self._builder._check_not_built()
        produced = produced or Produced()
        name = produced.name or self._builder._new_name("KSTREAM-SINK-")
        self._builder.topology.add_sink(
            name,
            topic,
            self._node,
            key_serde=produced.key_serde if produced.key_serde is not None else self._key_serde,
            value_serde=produced.value_serde if produced.value_serde is not None else self._value_serde,
            partitioner=produced.partitioner,
        )

    def group_by_key(self, grouped: Grouped | None = None) -> KGroupedStream:
        """Group by the current key (repartitioned first if an earlier operation changed it)."""
        grouped = grouped or Grouped()
        return KGroupedStream(self, grouped, repartition_required=self._key_changed)

    def group_by(self, selector: Callable[[Any, Any], Any], grouped: Grouped | None = None) -> KGroupedStream:
        """Group by ``selector(key, value)``: a key change, so always repartitioned."""
        grouped = grouped or Grouped()
        keyed = self.select_key(selector)
        return KGroupedStream(keyed, grouped, repartition_required=True)

    def join(self, table: KTable, joiner: Callable[[Any, Any], Any], joined: Joined | None = None) -> KStream:
        """Inner stream-table join: for each stream record, look the key up in ``table``
        (as of the record's timestamp if the table is versioned) and emit
        ``joiner(stream_value, table_value)`` when found."""
        return self._join(table, joiner, joined or Joined(), left=False)

    def left_join(self, table: KTable, joiner: Callable[[Any, Any], Any], joined: Joined | None = None) -> KStream:
        """Like :meth:`join`, but emits ``joiner(stream_value, None)`` when the key is absent."""
        return self._join(table, joiner, joined or Joined(), left=True)

    def _join(self, table: KTable, joiner: Callable[[Any, Any], Any], joined: Joined, *, left: bool) -> KStream:
        if not isinstance(table, KTable):
            raise TopologyError(f"a stream can only be joined with a KTable here, got {table!r}")
        if table._builder is not self._builder:
            raise TopologyError("cannot join a stream and a table of different StreamsBuilders")
        if table._store_name is None:
            raise TopologyError(f"table {table.node_name!r} is not materialized; it cannot be joined")
        builder = self._builder
        stream = self
        join_name = joined.name or builder._new_name("KSTREAM-JOIN-" if not left else "KSTREAM-LEFTJOIN-")
        if self._key_changed:
            stream = self._repartition(
                f"{join_name}-left",
                key_serde=joined.key_serde if joined.key_serde is not None else self._key_serde,
                value_serde=joined.value_serde if joined.value_serde is not None else self._value_serde,
            )
        store = table._store_name
        versioned = table._versioned
        builder.topology.add_processor(
            join_name, lambda: _StreamTableJoinProcessor(store, versioned, joiner, left), stream._node
        )
        builder.topology.connect_processor_and_state_stores(join_name, store)
        builder.topology.copartition(*(stream._source_topics | table._source_topics))
        return KStream(builder, join_name, key_changed=False, key_serde=stream._key_serde,
                       source_topics=stream._source_topics)

    def _repartition(self, name: str, *, key_serde: Any, value_serde: Any) -> KStream:
        """Filter out null keys, write to ``<name>-repartition``, read it back (new subtopology)."""
        builder = self._builder
        topology = builder.topology
        topic = f"{name}-repartition"
        filter_name = f"{name}-repartition-filter"
        sink_name = f"{name}-repartition-sink"
        source_name = f"{name}-repartition-source"
        topology.add_processor(filter_name, lambda: _FilterProcessor(lambda k, v: k is not None, False), self._node)
        topology.add_internal_topic(topic, "repartition")
        topology.add_sink(sink_name, topic, filter_name, key_serde=key_serde, value_serde=value_serde)
        topology.add_source(source_name, topic, key_serde=key_serde, value_serde=value_serde)
        return KStream(builder, source_name, key_changed=False, key_serde=key_serde, value_serde=value_serde,
                       source_topics=frozenset([topic]))

    def __repr__(self) -> str:
        return f"KStream({self._node!r})"


class KGroupedStream:
    """A stream grouped by key, ready for an aggregation."""

    def __init__(self, stream: KStream, grouped: Grouped, *, repartition_required: bool) -> None:
        self._stream = stream
        self._grouped = grouped
        self._repartition_required = repartition_required

    @property
    def _key_serde(self) -> Any:
        return self._grouped.key_serde if self._grouped.key_serde is not None else self._stream._key_serde

    @property
    def _value_serde(self) -> Any:
        return self._grouped.value_serde if self._grouped.value_serde is not None else self._stream._value_serde

    def _source_for(self, store_name: str) -> KStream:
        """The stream to aggregate: repartitioned (named after the grouping or the store)
        when the key changed, else the stream itself."""
        if not self._repartition_required:
            return self._stream
        return self._stream._repartition(
            self._grouped.name or store_name, key_serde=self._key_serde, value_serde=self._value_serde
        )

    def windowed_by(self, windows: SessionWindows) -> SessionWindowedKStream:
        if not isinstance(windows, SessionWindows):
            raise TopologyError(f"windowed_by supports SessionWindows, got {windows!r}")
        return SessionWindowedKStream(self, windows, EmitStrategy.on_window_update())

    def count(self, materialized: Materialized | None = None) -> KTable:
        """Count records per key (null keys and values are dropped and counted)."""
        from airflow_stateful_provider.streams.serdes import Serdes

        materialized = materialized or Materialized()
        if materialized.value_serde is None:
            materialized = materialized.with_value_serde(Serdes.int64())
        return self.aggregate(lambda: 0, lambda k, v, agg: agg + 1, materialized)

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: Materialized | None = None) -> KTable:
        """Combine values per key with ``reducer(aggregate, value)``."""
        materialized = materialized or Materialized()
        if materialized.value_serde is None and self._value_serde is not None:
            materialized = materialized.with_value_serde(self._value_serde)
        return self._aggregate(
            lambda: None, lambda k, v, agg: v if agg is None else reducer(agg, v), materialized, "KSTREAM-REDUCE-"
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None = None,
    ) -> KTable:
        """Fold values per key: ``aggregator(key, value, aggregate)`` starting from ``initializer()``."""
        return self._aggregate(initializer, aggregator, materialized or Materialized(), "KSTREAM-AGGREGATE-")

    def _aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                   materialized: Materialized, prefix: str) -> KTable:
        builder = self._stream._builder
        builder._check_not_built()
        store_name = materialized.store_name or builder._new_store_name(prefix)
        source = self._source_for(store_name)
        key_serde = materialized.key_serde if materialized.key_serde is not None else self._key_serde
        name = builder._new_name(prefix)
        store_builder = _store_builder_for(materialized, store_name, key_serde, materialized.value_serde, kind="aggregate")
        builder.topology.add_processor(name, lambda: _StreamAggregateProcessor(store_name, initializer, aggregator),
                                       source._node)
        builder.topology.add_state_store(store_builder, name)
        return KTable(builder, name, store_name=store_name, versioned=False, key_serde=key_serde,
                      value_serde=materialized.value_serde, source_topics=source._source_topics)


class SessionWindowedKStream:
    """A grouped stream windowed into sessions (SEMANTICS §4)."""

    def __init__(self, grouped: KGroupedStream, windows: SessionWindows, emit: EmitStrategy) -> None:
        self._grouped = grouped
        self._windows = windows
        self._emit = emit

    def emit_strategy(self, strategy: EmitStrategy) -> SessionWindowedKStream:
        """``EmitStrategy.on_window_update()`` (default) or ``EmitStrategy.on_window_close()``."""
        if not isinstance(strategy, EmitStrategy):
            raise TopologyError(f"emit_strategy needs an EmitStrategy, got {strategy!r}")
        return SessionWindowedKStream(self._grouped, self._windows, strategy)

    def count(self, materialized: Materialized | None = None) -> KTable:
        """Records per session; merging sessions adds their counts."""
        from airflow_stateful_provider.streams.serdes import Serdes

        materialized = materialized or Materialized()
        if materialized.value_serde is None:
            materialized = materialized.with_value_serde(Serdes.int64())
        return self._aggregate(lambda: 0, lambda k, v, agg: agg + 1, lambda k, a, b: a + b, materialized,
                               "KSTREAM-AGGREGATE-")

    def reduce(self, reducer: Callable[[Any, Any], Any], materialized: Materialized | None = None) -> KTable:
        """Combine the values of a session with ``reducer(aggregate, value)`` (also used to
        merge sessions)."""
        materialized = materialized or Materialized()
        if materialized.value_serde is None and self._grouped._value_serde is not None:
            materialized = materialized.with_value_serde(self._grouped._value_serde)

        def aggregator(key: Any, value: Any, agg: Any) -> Any:
            return value if agg is None else reducer(agg, value)

        def merger(key: Any, agg_one: Any, agg_two: Any) -> Any:
            # Kafka: mergerForAggregator(aggregator) = aggregator(key, agg_two, agg_one)
            return aggregator(key, agg_two, agg_one)

        return self._aggregate(lambda: None, aggregator, merger, materialized, "KSTREAM-REDUCE-")

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
        materialized: Materialized | None = None,
    ) -> KTable:
        """Session aggregate: ``aggregator(key, value, agg)`` per record, ``merger(key, agg1,
        agg2)`` when a record joins sessions, starting from ``initializer()``."""
        return self._aggregate(initializer, aggregator, merger, materialized or Materialized(), "KSTREAM-AGGREGATE-")

    def _aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                   merger: Callable[[Any, Any, Any], Any], materialized: Materialized, prefix: str) -> KTable:
        grouped = self._grouped
        builder = grouped._stream._builder
        builder._check_not_built()
        if materialized.is_versioned:
            raise TopologyError("a session aggregation cannot be materialized as a versioned store")
        windows = self._windows
        retention = materialized.retention_ms
        if retention is None:
            retention = windows.default_retention_ms()
        elif retention < windows.default_retention_ms():
            raise TopologyError(
                f"session store retention ({retention} ms) must be at least the inactivity gap plus "
                f"grace ({windows.default_retention_ms()} ms)"
            )
        store_name = materialized.store_name or builder._new_store_name(prefix)
        source = grouped._source_for(store_name)
        key_serde = materialized.key_serde if materialized.key_serde is not None else grouped._key_serde
        name = builder._new_name(prefix)
        store_builder = _store_builder_for(
            materialized, store_name, key_serde, materialized.value_serde, kind="session",
            session_retention_ms=retention, windows=windows,
        )
        emit = self._emit
        builder.topology.add_processor(
            name,
            lambda: _SessionWindowAggregateProcessor(
                store_name, windows, emit, initializer, aggregator, merger, retention_ms=retention
            ),
            source._node,
        )
        builder.topology.add_state_store(store_builder, name)
        return KTable(builder, name, store_name=store_name, versioned=False, key_serde=None,
                      value_serde=materialized.value_serde, source_topics=source._source_topics, windowed=True)


class KTable:
    """A changelog stream interpreted as a table: the latest value per key."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        *,
        store_name: str | None,
        versioned: bool,
        key_serde: Any,
        value_serde: Any,
        source_topics: frozenset[str],
        windowed: bool = False,
    ) -> None:
        self._builder = builder
        self._node = node
        self._store_name = store_name
        self._versioned = versioned
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._source_topics = source_topics
        self._windowed = windowed

    @property
    def node_name(self) -> str:
        return self._node

    @property
    def queryable_store_name(self) -> str | None:
        """The store behind the table (``driver.get_state_store(name)``)."""
        return self._store_name

    @property
    def is_versioned(self) -> bool:
        return self._versioned

    def to_stream(self, name: str | None = None) -> KStream:
        """The table's updates as a stream: (key, new value), None for a deletion."""
        self._builder._check_not_built()
        node = name or self._builder._new_name("KTABLE-TOSTREAM-")
        self._builder.topology.add_processor(node, _ToStreamProcessor, self._node)
        return KStream(self._builder, node, key_changed=False, key_serde=self._key_serde,
                       value_serde=self._value_serde, source_topics=self._source_topics)

    def __repr__(self) -> str:
        return f"KTable({self._node!r}, store={self._store_name!r})"


# ---------------------------------------------------------------------- processors


class _FilterProcessor(Processor):
    __slots__ = ("_predicate", "_negate")

    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool) -> None:
        self._predicate = predicate
        self._negate = negate

    def process(self, record: Record) -> None:
        if bool(self._predicate(record.key, record.value)) != self._negate:
            self.context.forward(record)


class _MapValuesProcessor(Processor):
    def __init__(self, mapper: Callable[[Any], Any]) -> None:
        self._mapper = mapper

    def process(self, record: Record) -> None:
        self.context.forward(record.with_value(self._mapper(record.value)))


class _MapProcessor(Processor):
    def __init__(self, mapper: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        self._mapper = mapper

    def process(self, record: Record) -> None:
        result = self._mapper(record.key, record.value)
        try:
            key, value = result
        except (TypeError, ValueError):
            raise TypeError(f"map() mapper must return a (key, value) pair, got {result!r}") from None
        self.context.forward(Record(key, value, record.timestamp, record.headers))


class _SelectKeyProcessor(Processor):
    def __init__(self, mapper: Callable[[Any, Any], Any]) -> None:
        self._mapper = mapper

    def process(self, record: Record) -> None:
        self.context.forward(record.with_key(self._mapper(record.key, record.value)))


class _PeekProcessor(Processor):
    def __init__(self, action: Callable[[Any, Any], None], forward: bool) -> None:
        self._action = action
        self._forward = forward

    def process(self, record: Record) -> None:
        self._action(record.key, record.value)
        if self._forward:
            self.context.forward(record)


class _ToStreamProcessor(Processor):
    def process(self, record: Record) -> None:
        change = record.value
        self.context.forward(record.with_value(change.new_value if isinstance(change, Change) else change))


def _log_dropped(context: Any, reason: str, detail: str) -> None:
    meta = context.record_metadata
    where = f"topic={meta.topic} partition={meta.partition} offset={meta.offset}" if meta else "no input record"
    log.warning("skipping record (%s): %s; %s", reason, detail, where)
    context.metrics.record_dropped(reason)


class _KTableSourceProcessor(Processor):
    """Materializes a table topic. A versioned table forwards an update only when the put
    was accepted, marking whether it is the newest version (SEMANTICS §5)."""

    def __init__(self, store_name: str, versioned: bool) -> None:
        self._store_name = store_name
        self._versioned = versioned

    def init(self, context: Any) -> None:
        super().init(context)
        self._store = context.get_state_store(self._store_name)

    def process(self, record: Record) -> None:
        if record.key is None:
            _log_dropped(self.context, "null-key", f"table {self._store_name!r} cannot hold a null key")
            return
        store = self._store
        if self._versioned:
            old = store.get(record.key)
            old_value = None if old is None else old.value
            result = store.put(record.key, record.value, record.timestamp)
            if result == PUT_RETURN_CODE_NOT_PUT:
                return
            is_latest = result == PUT_RETURN_CODE_VALID_TO_UNDEFINED
            self.context.forward(record.with_value(Change(record.value, old_value, is_latest)))
        else:
            old_value = store.get(record.key)
            store.put(record.key, record.value)
            self.context.forward(record.with_value(Change(record.value, old_value, True)))


class _StreamTableJoinProcessor(Processor):
    """KStream-KTable join: lookup by key, as of the stream record's timestamp when the
    table is versioned. Records with a null key or value are dropped (counted)."""

    def __init__(self, store_name: str, versioned: bool, joiner: Callable[[Any, Any], Any], left: bool) -> None:
        self._store_name = store_name
        self._versioned = versioned
        self._joiner = joiner
        self._left = left

    def init(self, context: Any) -> None:
        super().init(context)
        self._store = context.get_state_store(self._store_name)

    def process(self, record: Record) -> None:
        key = record.key
        if record.value is None or (key is None and not self._left):
            _log_dropped(self.context, "null-key-or-value", "a join needs a key and a value")
            return
        if key is None:
            table_value = None  # left join keeps records with a null key (Kafka does the same)
        elif self._versioned:
            found = self._store.get(key, record.timestamp)
            table_value = None if found is None else found.value
        else:
            table_value = self._store.get(key)
        if table_value is None and not self._left:
            return
        self.context.forward(record.with_value(self._joiner(record.value, table_value)))


class _StreamAggregateProcessor(Processor):
    """Non-windowed aggregation into a key-value store; forwards Change(new, old)."""

    def __init__(self, store_name: str, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any]) -> None:
        self._store_name = store_name
        self._initializer = initializer
        self._aggregator = aggregator

    def init(self, context: Any) -> None:
        super().init(context)
        self._store = context.get_state_store(self._store_name)

    def process(self, record: Record) -> None:
        if record.key is None or record.value is None:
            _log_dropped(self.context, "null-key-or-value", "an aggregation needs a key and a value")
            return
        old = self._store.get(record.key)
        agg = self._initializer() if old is None else old
        new = self._aggregator(record.key, record.value, agg)
        self._store.put(record.key, new)
        self.context.forward(record.with_value(Change(new, old)))


class _SessionWindowAggregateProcessor(Processor):
    """Session window aggregation exactly as SEMANTICS §4 / Kafka's KStreamSessionWindowAggregate."""

    def __init__(
        self,
        store_name: str,
        windows: SessionWindows,
        emit: EmitStrategy,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
        *,
        retention_ms: int | None = None,
    ) -> None:
        self._store_name = store_name
        self._retention_ms = windows.default_retention_ms() if retention_ms is None else retention_ms
        self._gap = windows.inactivity_gap_ms
        self._grace = windows.grace_period_ms
        self._on_close = emit.type is EmitStrategy.StrategyType.ON_WINDOW_CLOSE
        self._initializer = initializer
        self._aggregator = aggregator
        self._merger = merger
        self._observed_stream_time = -1
        self._last_emit_window_close_time = -1
        self._next_time_to_emit = 0
        self._emit_interval_ms = 1000

    def init(self, context: Any) -> None:
        super().init(context)
        self._store = context.get_state_store(self._store_name)
        interval = getattr(getattr(context, "config", None), "windowed_aggregation_emit_interval_ms", None)
        if interval is not None:
            self._emit_interval_ms = interval
        self._cached = False
        if not self._on_close:
            set_flush_listener = getattr(self._store, "set_flush_listener", None)
            if set_flush_listener is not None:
                self._node = getattr(context, "current_node", None)
                self._cached = set_flush_listener(self._forward_flushed)
        if self._on_close:
            # how the store expires sessions (its own figures when it exposes them: a reopened
            # store keeps the retention it was created with)
            retention = getattr(self._store, "retention_ms", None)
            interval = getattr(self._store, "segment_interval_ms", None)
            if type(retention) is not int or type(interval) is not int:
                retention, interval = self._retention_ms, session_segment_interval(self._retention_ms)
            self._retention_ms, self._segment_interval_ms = retention, interval
            # restore how far closed windows were already emitted (committed with the offsets)
            lookup = getattr(context, "processor_metadata_for_key", None)
            last = lookup(self._store_name) if lookup is not None else None
            if last is not None:
                self._last_emit_window_close_time = last

    def process(self, record: Record) -> None:
        key = record.key
        if key is None:
            _log_dropped(self.context, "null-key", "a session aggregation needs a key")
            return
        ts = record.timestamp
        if ts > self._observed_stream_time:
            self._observed_stream_time = ts
            if self._on_close:
                self._forward_before_expiry(record)
        close_time = self._observed_stream_time - self._grace - self._gap
        store = self._store
        merged = store.find_sessions(key, ts - self._gap, ts + self._gap)
        agg = self._initializer()
        start = end = ts
        for session, value in merged:
            agg = self._merger(key, agg, value)
            if session.window.start < start:
                start = session.window.start
            if session.window.end > end:
                end = session.window.end
        if end < close_time:
            _log_dropped(
                self.context,
                "late",
                f"session [{start},{end}] of key {key!r} ends before the window close time {close_time} "
                f"(stream time {self._observed_stream_time}, timestamp {ts})",
            )
        else:
            merged_window = SessionWindow(start, end)
            if merged_window != SessionWindow(ts, ts):
                for session, value in merged:
                    store.remove(session)
                    self._forward_update(session, None, value)
            agg = self._aggregator(key, record.value, agg)
            windowed = Windowed(key, merged_window)
            store.put(windowed, agg)
            self._forward_update(windowed, agg, None)
        if self._on_close:
            self._maybe_forward_final(record, close_time)

    def _forward_flushed(self, windowed: Windowed, new: Any, old: Any) -> None:
        """A cached session written through (commit or eviction): forward it as this node."""
        context = self.context
        previous = context.current_node
        context.current_node = self._node
        try:
            context.forward(Record(windowed, Change(new, old), windowed.window.end))
        finally:
            context.current_node = previous

    def _forward_update(self, windowed: Windowed, new: Any, old: Any) -> None:
        if self._on_close or self._cached:
            return
        # a new record (no input headers), stamped with the window end, as Kafka does
        self.context.forward(Record(windowed, Change(new, old), windowed.window.end))

    def _forward_before_expiry(self, record: Record) -> None:
        """Forward the sessions the store is about to drop, before this record's put drops them.

        The put of a record that advances stream time to ``t`` moves the store's observed
        stream time to ``t`` and drops every segment below ``(t - retention) // interval``.
        Those sessions end before ``bound = that id * interval <= t - retention <= close
        time``, so they are closed, and the throttled scan after the put (or a later one)
        would no longer find them. Forward them now, bypassing the wall-clock throttle; at
        most once per segment interval of stream time. No session this record merges lies
        below ``bound`` (merged sessions end at ``>= ts - gap >= t - retention``), so the
        output is what an unthrottled scan after the put would forward, in the same order.
        """
        interval = self._segment_interval_ms
        bound = (self._observed_stream_time - self._retention_ms) // interval * interval
        if bound <= 0 or bound <= self._last_emit_window_close_time:
            return
        self._forward_closed(record, max(0, self._last_emit_window_close_time), bound - 1)
        self._set_last_emitted(bound)

    def _forward_closed(self, record: Record, lower: int, upper: int) -> None:
        """Forward every session with end in [lower, upper] (closed), in (end, key, start) order."""
        for session, value in self._store.find_sessions_by_end(lower, upper):
            self.context.forward(Record(session, Change(value, None), session.window.end, record.headers))

    def _set_last_emitted(self, close_time: int) -> None:
        self._last_emit_window_close_time = close_time
        record_metadata = getattr(self.context, "add_processor_metadata_key_value", None)
        if record_metadata is not None:
            record_metadata(self._store_name, close_time)

    def _maybe_forward_final(self, record: Record, close_time: int) -> None:
        now = self.context.current_system_time_ms
        if now < self._next_time_to_emit:  # throttled (windowed_aggregation_emit_interval_ms)
            return
        self._next_time_to_emit = now + self._emit_interval_ms
        if self._last_emit_window_close_time != -1 and self._last_emit_window_close_time >= close_time:
            return
        upper = close_time - 1  # session bounds are inclusive
        if upper < 0:
            return
        lower = max(0, self._last_emit_window_close_time)
        if upper < lower:
            return
        self._forward_closed(record, lower, upper)
        self._set_last_emitted(close_time)
