"""The topology under construction and the names of its nodes.

Every DSL object adds its nodes here. Names follow Kafka Streams (``PREFIX-0000000003``),
so ``describe()`` reads the same; a built topology refuses further additions.
"""

from __future__ import annotations

import itertools

from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.state.common.builder import StoreBuilder
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["InternalStreamsBuilder"]


class InternalStreamsBuilder:
    """What the DSL objects of one :class:`StreamsBuilder` share."""

    def __init__(self) -> None:
        self.topology = Topology()
        self._index = itertools.count()
        self.built = False
        #: Stores added with ``StreamsBuilder.add_state_store``, waiting for a processor.
        self.pending_stores: dict[str, StoreBuilder] = {}

    def new_name(self, prefix: str) -> str:
        return f"{prefix}{next(self._index):010d}"

    def new_store_name(self, prefix: str) -> str:
        return f"{prefix}STATE-STORE-{next(self._index):010d}"

    def check_not_built(self) -> None:
        if self.built:
            raise TopologyError("this StreamsBuilder was already built; create a new one")
