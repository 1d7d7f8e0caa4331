"""How a topology asks for a session store, and how a task builds it (common/builder.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.state.common.builder import (
    CHANGELOG_ADDITIONAL_RETENTION_MS,
    BuiltStore,
    StoreBuilder,
    StoreContext,
    check_store_name,
)
from airflow_stateful_provider.streams.state.session.caching import CachingSessionStore
from airflow_stateful_provider.streams.state.session.changelogging import ChangeloggingSessionStore
from airflow_stateful_provider.streams.state.session.in_memory import InMemorySessionStore
from airflow_stateful_provider.streams.state.session.kind import SESSION
from airflow_stateful_provider.streams.state.session.rocksdb import RocksDBSessionStore
from airflow_stateful_provider.streams.state.session.store import session_segment_interval
from airflow_stateful_provider.streams.state.session.typed import TypedSessionStore

__all__ = ["SessionBytesStoreSupplier", "SessionStoreBuilder"]


@dataclasses.dataclass(frozen=True)
class SessionBytesStoreSupplier:
    """``Stores.persistent_session_store`` / ``in_memory_session_store``: the name, the
    retention and the implementation."""

    name: str
    retention_ms: int
    persistent: bool = True

    def __post_init__(self) -> None:
        check_store_name(self.name)
        if self.retention_ms <= 0:
            raise ConfigError(f"session store {self.name!r} retention must be > 0 ms, got {self.retention_ms}")


@dataclasses.dataclass
class SessionStoreBuilder(StoreBuilder):
    """Builds: RocksDB or in-memory store -> changelogging -> record cache (when caching is
    enabled and the application has a cache budget) -> typed view."""

    retention_ms: int = 0
    inactivity_gap_ms: int | None = None
    grace_period_ms: int | None = None
    #: keep sessions indexed by end too (state/session/index.py): set for the stores of
    #: emit-on-window-close aggregations, as Kafka gives them its time-ordered session store
    time_index: bool = False

    kind = SESSION
    window_type = "session"

    def _base_changelog_config(self) -> dict[str, str]:
        return {
            "cleanup.policy": "compact,delete",
            "retention.ms": str(self.retention_ms + CHANGELOG_ADDITIONAL_RETENTION_MS),
        }

    def settings(self) -> dict[str, int | None]:
        return {"retention_ms": self.retention_ms, "segment_interval_ms": session_segment_interval(self.retention_ms),
                "inactivity_gap_ms": self.inactivity_gap_ms, "grace_period_ms": self.grace_period_ms}

    def build(self, context: StoreContext) -> BuiltStore:
        serdes = {"key_serde": context.key_serde, "value_serde": context.value_serde}
        raw: RocksDBSessionStore | InMemorySessionStore
        if context.persistent:
            raw = RocksDBSessionStore(
                context.path, self.retention_ms, name=self.name, transactional=context.transactional, **serdes,
                rocksdb_memory=context.rocksdb_memory,
                inactivity_gap=self.inactivity_gap_ms, grace_period=self.grace_period_ms, time_index=self.time_index,
            )
        else:
            raw = InMemorySessionStore(self.retention_ms, self.name, **serdes)
        logged: Any = raw
        if context.changelog is not None:
            logged = ChangeloggingSessionStore(raw, context.changelog, context.record_timestamp)
        cache = None
        if self.caching_enabled and context.cache_max_bytes is not None:
            cache = logged = CachingSessionStore(logged, context.cache_max_bytes,
                                                 record_timestamp=context.record_timestamp,
                                                 set_record_timestamp=context.set_record_timestamp)
        return BuiltStore(raw, TypedSessionStore(logged, context.key_serde, context.value_serde), cache)
