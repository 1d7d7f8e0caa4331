"""How a topology asks for a versioned store, and how a task builds it (common/builder.py)."""

from __future__ import annotations

import dataclasses

from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.state.common.builder import (
    CHANGELOG_ADDITIONAL_RETENTION_MS,
    BuiltStore,
    StoreBuilder,
    StoreContext,
    check_store_name,
)
from airflow_stateful_provider.streams.state.versioned.changelogging import ChangeloggingVersionedKeyValueStore
from airflow_stateful_provider.streams.state.versioned.in_memory import InMemoryVersionedKeyValueStore
from airflow_stateful_provider.streams.state.versioned.kind import VERSIONED
from airflow_stateful_provider.streams.state.versioned.rocksdb import RocksDBVersionedKeyValueStore
from airflow_stateful_provider.streams.state.versioned.store import segment_interval_ms as resolved_segment_interval
from airflow_stateful_provider.streams.state.versioned.typed import TypedVersionedKeyValueStore

__all__ = ["VersionedBytesStoreSupplier", "VersionedKeyValueStoreBuilder"]


@dataclasses.dataclass(frozen=True)
class VersionedBytesStoreSupplier:
    """``Stores.persistent_versioned_key_value_store`` / ``in_memory_versioned_key_value_store``:
    the name, the history retention, the segment interval and the implementation."""

    name: str
    history_retention_ms: int
    segment_interval_ms: int | None = None
    persistent: bool = True

    def __post_init__(self) -> None:
        check_store_name(self.name)
        if self.history_retention_ms < 0:
            raise ConfigError(
                f"versioned store {self.name!r} history retention must be >= 0 ms, got {self.history_retention_ms}"
            )
        if self.segment_interval_ms is not None and self.segment_interval_ms < 1:
            raise ConfigError(
                f"versioned store {self.name!r} segment interval must be >= 1 ms, got {self.segment_interval_ms}"
            )


@dataclasses.dataclass
class VersionedKeyValueStoreBuilder(StoreBuilder):
    """Builds: RocksDB or in-memory store -> changelogging (records stamped with the
    version's timestamp) -> typed view."""

    history_retention_ms: int = 0
    segment_interval_ms: int | None = None

    kind = VERSIONED

    def _base_changelog_config(self) -> dict[str, str]:
        return {
            "cleanup.policy": "compact",
            "min.compaction.lag.ms": str(self.history_retention_ms + CHANGELOG_ADDITIONAL_RETENTION_MS),
        }

    def settings(self) -> dict[str, int | None]:
        return {"history_retention_ms": self.history_retention_ms,
                "segment_interval_ms": resolved_segment_interval(self.segment_interval_ms, self.history_retention_ms)}

    def build(self, context: StoreContext) -> BuiltStore:
        serdes = {"key_serde": context.key_serde, "value_serde": context.value_serde}
        raw: RocksDBVersionedKeyValueStore | InMemoryVersionedKeyValueStore
        if context.persistent:
            raw = RocksDBVersionedKeyValueStore(
                context.path, self.history_retention_ms, segment_interval=self.segment_interval_ms, name=self.name,
                transactional=context.transactional, rocksdb_memory=context.rocksdb_memory, **serdes,
            )
        else:
            raw = InMemoryVersionedKeyValueStore(self.history_retention_ms, self.name,
                                                 segment_interval=self.segment_interval_ms, **serdes)
        logged = raw if context.changelog is None else ChangeloggingVersionedKeyValueStore(raw, context.changelog)
        return BuiltStore(raw, TypedVersionedKeyValueStore(logged, context.key_serde, context.value_serde))
