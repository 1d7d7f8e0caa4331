"""StreamsBuilder: the DSL's entry point; ``build()`` returns the Topology."""

from __future__ import annotations

from collections.abc import Sequence

from airflow_stateful_provider.streams.dsl.internal_builder import InternalStreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized, key_value_store_builder
from airflow_stateful_provider.streams.dsl.parameters import Consumed
from airflow_stateful_provider.streams.dsl.streams import KStream, KTable
from airflow_stateful_provider.streams.dsl.table_processors import KTableSourceProcessor
from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.state.common.builder import StoreBuilder
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["StreamsBuilder"]


class StreamsBuilder:
    """Entry point of the DSL; ``build()`` returns the Topology."""

    def __init__(self) -> None:
        self._internal = InternalStreamsBuilder()

    @property
    def topology(self) -> Topology:
        return self._internal.topology

    def stream(self, topics: str | Sequence[str], consumed: Consumed | None = None) -> KStream:
        """A stream of the records of ``topics``."""
        self._internal.check_not_built()
        consumed = consumed or Consumed()
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        name = consumed.name or self._internal.new_name("KSTREAM-SOURCE-")
        self._internal.topology.add_source(
            name, *topic_list, key_serde=consumed.key_serde, value_serde=consumed.value_serde
        )
        return KStream(self._internal, name, key_serde=consumed.key_serde, value_serde=consumed.value_serde,
                       source_topics=frozenset(topic_list))

    def table(self, topic: str, consumed: Consumed | None = None, materialized: Materialized | None = None) -> KTable:
        """A table of the latest value per key of ``topic`` (a versioned table with
        ``Materialized.as_versioned``). Always materialized, so it can be joined."""
        self._internal.check_not_built()
        consumed = consumed or Consumed()
        materialized = materialized or Materialized()
        source_name = consumed.name or self._internal.new_name("KSTREAM-SOURCE-")
        key_serde = materialized.key_serde if materialized.key_serde is not None else consumed.key_serde
        value_serde = materialized.value_serde if materialized.value_serde is not None else consumed.value_serde
        self._internal.topology.add_source(
            source_name, topic, key_serde=consumed.key_serde, value_serde=consumed.value_serde
        )
        table_name = self._internal.new_name("KTABLE-SOURCE-")
        store_name = materialized.store_name or self._internal.new_store_name(f"{topic}-")
        builder = key_value_store_builder(materialized, store_name, key_serde, value_serde, table=True)
        versioned = materialized.is_versioned
        self._internal.topology.add_processor(
            table_name, lambda: KTableSourceProcessor(store_name, versioned), source_name
        )
        self._internal.topology.add_state_store(builder, table_name)
        return KTable(
            self._internal, table_name, store_name=store_name, versioned=versioned, key_serde=key_serde,
            value_serde=value_serde, source_topics=frozenset([topic]),
        )

    def add_state_store(self, builder: StoreBuilder) -> StreamsBuilder:
        """Register a store for use by ``KStream.process(supplier, store_name)``."""
        self._internal.check_not_built()
        self._internal.pending_stores[builder.name] = builder
        return self

    def build(self) -> Topology:
        """The Topology. Stores added with :meth:`add_state_store` must be used by a processor."""
        self._internal.check_not_built()
        for name in self._internal.pending_stores:
            raise TopologyError(f"state store {name!r} was added to the builder but no processor uses it")
        self._internal.built = True
        self._internal.topology.validate()
        return self._internal.topology
