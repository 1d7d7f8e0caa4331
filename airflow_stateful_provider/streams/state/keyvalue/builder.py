"""How a topology asks for a key-value store, and how a task builds it (common/builder.py)."""

from __future__ import annotations

import dataclasses

from airflow_stateful_provider.streams.state.common.builder import (
    BuiltStore,
    StoreBuilder,
    StoreContext,
    check_store_name,
)
from airflow_stateful_provider.streams.state.keyvalue.changelogging import ChangeloggingKeyValueStore
from airflow_stateful_provider.streams.state.keyvalue.in_memory import InMemoryKeyValueStore
from airflow_stateful_provider.streams.state.keyvalue.kind import KEY_VALUE
from airflow_stateful_provider.streams.state.keyvalue.rocksdb import RocksDBKeyValueStore
from airflow_stateful_provider.streams.state.keyvalue.ttl import TimeToLiveKeyValueStore
from airflow_stateful_provider.streams.state.keyvalue.typed import TypedKeyValueStore

__all__ = ["KeyValueBytesStoreSupplier", "KeyValueStoreBuilder"]


@dataclasses.dataclass(frozen=True)
class KeyValueBytesStoreSupplier:
    """``Stores.persistent_key_value_store`` / ``in_memory_key_value_store``: the name and
    the implementation."""

    name: str
    persistent: bool = True

    def __post_init__(self) -> None:
        check_store_name(self.name)


@dataclasses.dataclass
class KeyValueStoreBuilder(StoreBuilder):
    """Builds: RocksDB or in-memory store -> changelogging -> [time to live] -> typed view.

    ``time_to_live_ms``: keys not updated for that long (stream time) are deleted (ttl.py)."""

    kind = KEY_VALUE
    time_to_live_ms: int | None = None

    def _base_changelog_config(self) -> dict[str, str]:
        return {"cleanup.policy": "compact"}

    def settings(self) -> dict[str, int | None]:
        return {"time_to_live_ms": self.time_to_live_ms}

    def build(self, context: StoreContext) -> BuiltStore:
        serdes = {"key_serde": context.key_serde, "value_serde": context.value_serde}
        raw: RocksDBKeyValueStore | InMemoryKeyValueStore
        if context.persistent:
            raw = RocksDBKeyValueStore(context.path, name=self.name, transactional=context.transactional,
                                       rocksdb_memory=context.rocksdb_memory, **serdes)
        else:
            raw = InMemoryKeyValueStore(self.name, **serdes)
        logged = raw if context.changelog is None else \
            ChangeloggingKeyValueStore(raw, context.changelog, context.record_timestamp)
        if self.time_to_live_ms is None:
            return BuiltStore(raw, TypedKeyValueStore(logged, context.key_serde, context.value_serde))
        ttl = TimeToLiveKeyValueStore(logged, self.time_to_live_ms, context.record_timestamp)
        return BuiltStore(raw, TypedKeyValueStore(ttl, context.key_serde, context.value_serde), retention=ttl)
