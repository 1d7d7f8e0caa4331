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
    """Builds: RocksDB or in-memory store -> changelogging -> typed view."""

    kind = KEY_VALUE

    def _base_changelog_config(self) -> dict[str, str]:
        return {"cleanup.policy": "compact"}

    def build(self, context: StoreContext) -> BuiltStore:
        serdes = {"key_serde": context.key_serde, "value_serde": context.value_serde}
        raw: RocksDBKeyValueStore | InMemoryKeyValueStore
        if context.persistent:
            raw = RocksDBKeyValueStore(context.path, name=self.name, transactional=context.transactional, **serdes)
        else:
            raw = InMemoryKeyValueStore(self.name, **serdes)
        logged = raw if context.changelog is None else \
            ChangeloggingKeyValueStore(raw, context.changelog, context.record_timestamp)
        return BuiltStore(raw, TypedKeyValueStore(logged, context.key_serde, context.value_serde))
