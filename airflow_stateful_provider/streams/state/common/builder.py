"""Store builders: what a topology says about a store, and how a task builds it.

As in Kafka Streams, a builder carries a store's name, serdes and changelog settings (what
``Topology.add_state_store`` takes) and builds the store's whole stack. Each kind has one
(``<kind>/builder.py``): for one task it builds the byte store (RocksDB, transactional under
exactly-once, or in memory), the changelogging wrapper, the record cache when the kind has
one, and the typed view processors see. The runtime hands it a :class:`StoreContext` once
per store and keeps the :class:`BuiltStore`; nothing here runs per record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogWriter
from airflow_stateful_provider.streams.state.common.kind import StoreKind
from airflow_stateful_provider.streams.state.common.rocksdb_memory import RocksDBMemory

__all__ = ["CHANGELOG_ADDITIONAL_RETENTION_MS", "BuiltStore", "StoreBuilder", "StoreContext", "check_store_name"]

#: Added to a windowed/versioned store's retention for its changelog (Kafka's default
#: ``windowstore.changelog.additional.retention.ms``).
CHANGELOG_ADDITIONAL_RETENTION_MS = 86_400_000


def check_store_name(name: Any) -> str:
    if not isinstance(name, str) or not name or any(c.isspace() for c in name) or "/" in name:
        raise TopologyError(f"store name must be a non-empty string without spaces or '/', got {name!r}")
    return name


@dataclasses.dataclass(frozen=True)
class StoreContext:
    """What a task gives a builder to build one store with."""

    #: The store's directory (used by persistent stores only).
    path: str
    persistent: bool
    #: Exactly-once: RocksDB takes the writes only when the transaction commits
    #: (common/transaction_buffer.py).
    transactional: bool
    key_serde: Any
    value_serde: Any
    #: Where the changelogging wrapper sends every write; None: logging is disabled.
    changelog: ChangelogWriter | None
    #: Timestamp of the record being processed (changelog records, cache entries).
    record_timestamp: Callable[[], int]
    #: What a record cache sets while it writes an entry through (the timestamp of the record
    #: that last touched it), and resets with None.
    set_record_timestamp: Callable[[int | None], None]
    #: A record cache's byte budget; None: no cache.
    cache_max_bytes: int | None
    #: The instance's RocksDB memory budget and options (rocksdb_memory.py); None: the
    #: process default.
    rocksdb_memory: RocksDBMemory | None = None


@dataclasses.dataclass(frozen=True)
class BuiltStore:
    """One store as a task holds it."""

    #: The byte store: restoration writes into it; flush, commit and close go to it.
    raw: Any
    #: What processors get from ``context.get_state_store``.
    typed: Any
    #: The record cache in the stack, if any: written through (``flush_cache``) before the
    #: stores flush.
    cache: Any = None
    #: Where retention is enforced when it is not the byte store's own (a key-value store's
    #: time to live, keyvalue/ttl.py): its ``enforce_retention(now_ms)`` writes through the
    #: changelog, so only a running active task calls it.
    retention: Any = None


@dataclasses.dataclass
class StoreBuilder:
    """What every builder has; each kind's builder adds its time parameters, its changelog
    topic configs and :meth:`build`."""

    name: str
    key_serde: Any = None
    value_serde: Any = None
    #: RocksDB (True) or in memory (False); None (DSL stores): ``StreamsConfig.default_dsl_store``.
    persistent: bool | None = True
    logging_enabled: bool = True
    log_config: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Write-back record cache (state/session/caching.py); honoured by session stores.
    caching_enabled: bool = False

    #: The kind of store it builds.
    kind: ClassVar[StoreKind]
    #: The windows its stores hold ("session"), or None for a store that is not windowed.
    window_type: ClassVar[str | None] = None

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> StoreBuilder:
        """Keep a changelog; ``config`` adds or overrides changelog topic configs."""
        self.logging_enabled = True
        self.log_config = {str(k): str(v) for k, v in (config or {}).items()}
        return self

    def with_caching_enabled(self) -> StoreBuilder:
        """Collapse updates of the same key between commits (see state/session/caching.py)."""
        self.caching_enabled = True
        return self

    def with_caching_disabled(self) -> StoreBuilder:
        self.caching_enabled = False
        return self

    def with_logging_disabled(self) -> StoreBuilder:
        """No changelog: the store is lost with its task directory (no restoration)."""
        self.logging_enabled = False
        self.log_config = {}
        return self

    def _base_changelog_config(self) -> dict[str, str]:
        raise NotImplementedError

    def settings(self) -> dict[str, int | None]:
        """The time parameters of the stores it builds, named as the kind's store metadata names
        them (``retention_ms``, ...), known before any store exists: what a redeploy compares
        (streams/redeploy/). None for a setting not given."""
        return {}

    def changelog_config(self) -> dict[str, str]:
        """Topic configs of this store's changelog (docs/semantics.md §7), user overrides last."""
        config = {"message.timestamp.type": "CreateTime", **self._base_changelog_config()}
        config.update(self.log_config)
        return config

    def build(self, context: StoreContext) -> BuiltStore:
        """The store's stack for one task (see module docstring)."""
        raise NotImplementedError
