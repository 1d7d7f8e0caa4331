"""The counter kind's stack: changelogging wrapper, typed view and the builder that builds them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from airflow_stateful_provider.streams.state.common.builder import BuiltStore, StoreBuilder, StoreContext
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogWriter
from airflow_stateful_provider.streams.state.common.changelogging import ChangeloggingStore
from airflow_stateful_provider.streams.state.common.typed import TypedStore
from tests.counter_kind.kind import COUNTER
from tests.counter_kind.stores import TOTAL, InMemoryCounterStore, RocksDBCounterStore

__all__ = ["ChangeloggingCounterStore", "CounterStoreBuilder", "TypedCounterStore", "counter_store"]


class ChangeloggingCounterStore(ChangeloggingStore):
    """Logs each new total: key -> total (8 bytes), stamped with the record being processed."""

    reads = ("get", "all")

    def __init__(self, inner: Any, writer: ChangelogWriter, timestamp: Any) -> None:
        super().__init__(inner, writer)
        self._add, self._send, self._timestamp = inner.add, writer.send, timestamp

    def add(self, key: bytes, delta: int) -> int:
        total: int = self._add(key, delta)
        self._send(key, TOTAL.pack(total), self._timestamp())
        return total


class TypedCounterStore(TypedStore):
    """What processors see: counters by typed key."""

    __slots__ = ()

    def get(self, key: Any) -> int | None:
        return self.inner.get(self._key(key))  # type: ignore[no-any-return]

    def add(self, key: Any, delta: int = 1) -> int:
        return self.inner.add(self._key(key), delta)  # type: ignore[no-any-return]

    def all(self) -> Iterator[tuple[Any, int]]:
        kd = self._kd
        return ((kd(key), total) for key, total in self.inner.all())


@dataclasses.dataclass
class CounterStoreBuilder(StoreBuilder):
    """Builds: RocksDB or in-memory counters -> changelogging -> typed view."""

    kind = COUNTER

    def _base_changelog_config(self) -> dict[str, str]:
        return {"cleanup.policy": "compact"}

    def build(self, context: StoreContext) -> BuiltStore:
        serdes = {"key_serde": context.key_serde, "value_serde": "int64"}
        raw: RocksDBCounterStore | InMemoryCounterStore
        if context.persistent:
            raw = RocksDBCounterStore(context.path, name=self.name, transactional=context.transactional, **serdes)
        else:
            raw = InMemoryCounterStore(self.name, **serdes)
        logged = raw if context.changelog is None else \
            ChangeloggingCounterStore(raw, context.changelog, context.record_timestamp)
        return BuiltStore(raw, TypedCounterStore(logged, context.key_serde, context.value_serde))


def counter_store(name: str, key_serde: Any = None, *, persistent: bool = True) -> CounterStoreBuilder:
    """A counter store for ``Topology.add_state_store`` (key serde None: the application's default)."""
    return CounterStoreBuilder(name, key_serde, "int64", persistent)
