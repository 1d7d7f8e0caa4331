"""KStream, KGroupedStream, SessionWindowedKStream, KTable: the abstractions a topology is
chained from. They create each other (a stream groups into a table, a table turns back into
a stream), so they live in one module; each adds its nodes through the internal builder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_stateful_provider.streams.dsl.aggregate_processors import (
    SessionWindowAggregateProcessor,
    StreamAggregateProcessor,
)
from airflow_stateful_provider.streams.dsl.internal_builder import InternalStreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import (
    Materialized,
    key_value_store_builder,
    session_store_builder,
)
from airflow_stateful_provider.streams.dsl.parameters import Grouped, Joined, Produced
from airflow_stateful_provider.streams.dsl.stateless_processors import (
    FilterProcessor,
    MapProcessor,
    MapValuesProcessor,
    PeekProcessor,
    SelectKeyProcessor,
    ToStreamProcessor,
)
from airflow_stateful_provider.streams.dsl.table_processors import StreamTableJoinProcessor
from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.processor import ProcessorSupplier
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.windows import EmitStrategy, SessionWindows

__all__ = ["KGroupedStream", "KStream", "KTable", "SessionWindowedKStream"]


class KStream:
    """A record stream. Every operation returns a new KStream (or table/grouping) and
    adds nodes to the builder's topology."""

    def __init__(
        self,
        builder: InternalStreamsBuilder,
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
        self._builder.check_not_built()
        node = name or self._builder.new_name(prefix)
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
        return self._child("KSTREAM-FILTER-", lambda: FilterProcessor(predicate, False), name)

    def filter_not(self, predicate: Callable[[Any, Any], bool], name: str | None = None) -> KStream:
        """Drop records for which ``predicate(key, value)`` is true."""
        return self._child("KSTREAM-FILTER-", lambda: FilterProcessor(predicate, True), name)

    def map_values(self, mapper: Callable[[Any], Any], name: str | None = None) -> KStream:
        """Replace each value with ``mapper(value)``; the key (and partitioning) is kept."""
        return self._child("KSTREAM-MAPVALUES-", lambda: MapValuesProcessor(mapper), name, value_serde=None)

    def map(self, mapper: Callable[[Any, Any], tuple[Any, Any]], name: str | None = None) -> KStream:
        """Replace each record with ``mapper(key, value) -> (new_key, new_value)``; marks the
        stream for repartitioning before a stateful operation."""
        return self._child(
            "KSTREAM-MAP-", lambda: MapProcessor(mapper), name, key_changed=True, key_serde=None, value_serde=None
        )

    def select_key(self, mapper: Callable[[Any, Any], Any], name: str | None = None) -> KStream:
        """Set each record's key to ``mapper(key, value)`` (repartitions before stateful ops)."""
        return self._child("KSTREAM-KEY-SELECT-", lambda: SelectKeyProcessor(mapper), name,
                           key_changed=True, key_serde=None)

    def peek(self, action: Callable[[Any, Any], None], name: str | None = None) -> KStream:
        """Call ``action(key, value)`` for each record and pass it on unchanged."""
        return self._child("KSTREAM-PEEK-", lambda: PeekProcessor(action, forward=True), name)

    def foreach(self, action: Callable[[Any, Any], None], name: str | None = None) -> None:
        """Terminal: call ``action(key, value)`` for each record."""
        self._child("KSTREAM-FOREACH-", lambda: PeekProcessor(action, forward=False), name)

    def process(self, supplier: ProcessorSupplier, *store_names: str, name: str | None = None) -> KStream:
        """Run a hand-written Processor (it may forward); ``store_names`` are stores added
        with ``StreamsBuilder.add_state_store`` (or other DSL stores) it may use."""
        stream = self._child("KSTREAM-PROCESSOR-", supplier, name, key_changed=True, key_serde=None, value_serde=None)
        topology = self._builder.topology
        pending = self._builder.pending_stores
        for store in store_names:
            if store in pending:
                topology.add_state_store(pending.pop(store), stream._node)
            else:
                topology.connect_processor_and_state_stores(stream._node, store)
        return stream

    def to(self, topic: str | Callable[[Any, Any, Any], str], produced: Produced | None = None) -> None:
        """Write the stream to ``topic`` (or to the topic an extractor returns per record)."""
        self._builder.check_not_built()
        produced = produced or Produced()
        name = produced.name or self._builder.new_name("KSTREAM-SINK-")
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
        join_name = joined.name or builder.new_name("KSTREAM-JOIN-" if not left else "KSTREAM-LEFTJOIN-")
        if self._key_changed:
            stream = self._repartition(
                f"{join_name}-left",
                key_serde=joined.key_serde if joined.key_serde is not None else self._key_serde,
                value_serde=joined.value_serde if joined.value_serde is not None else self._value_serde,
            )
        store = table._store_name
        versioned = table._versioned
        builder.topology.add_processor(
            join_name, lambda: StreamTableJoinProcessor(store, versioned, joiner, left), stream._node
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
        topology.add_processor(filter_name, lambda: FilterProcessor(lambda k, v: k is not None, False), self._node)
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
        builder.check_not_built()
        store_name = materialized.store_name or builder.new_store_name(prefix)
        source = self._source_for(store_name)
        key_serde = materialized.key_serde if materialized.key_serde is not None else self._key_serde
        name = builder.new_name(prefix)
        store_builder = key_value_store_builder(materialized, store_name, key_serde, materialized.value_serde,
                                                table=False)
        builder.topology.add_processor(name, lambda: StreamAggregateProcessor(store_name, initializer, aggregator),
                                       source._node)
        builder.topology.add_state_store(store_builder, name)
        return KTable(builder, name, store_name=store_name, versioned=False, key_serde=key_serde,
                      value_serde=materialized.value_serde, source_topics=source._source_topics)


class SessionWindowedKStream:
    """A grouped stream windowed into sessions (docs/semantics.md §4)."""

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
        builder.check_not_built()
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
        store_name = materialized.store_name or builder.new_store_name(prefix)
        source = grouped._source_for(store_name)
        key_serde = materialized.key_serde if materialized.key_serde is not None else grouped._key_serde
        name = builder.new_name(prefix)
        emit = self._emit
        store_builder = session_store_builder(
            materialized, store_name, key_serde, materialized.value_serde, retention_ms=retention, windows=windows,
            # what closed is found by end time: cheap with the time index (state/session/index.py)
            time_index=emit.type is EmitStrategy.StrategyType.ON_WINDOW_CLOSE,
        )
        builder.topology.add_processor(
            name,
            lambda: SessionWindowAggregateProcessor(
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
        builder: InternalStreamsBuilder,
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
        self._builder.check_not_built()
        node = name or self._builder.new_name("KTABLE-TOSTREAM-")
        self._builder.topology.add_processor(node, ToStreamProcessor, self._node)
        return KStream(self._builder, node, key_changed=False, key_serde=self._key_serde,
                       value_serde=self._value_serde, source_topics=self._source_topics)

    def __repr__(self) -> str:
        return f"KTable({self._node!r}, store={self._store_name!r})"
