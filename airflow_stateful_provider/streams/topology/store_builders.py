"""Store builders: what a topology says about a store, built once per task.

Mirrors Kafka Streams' ``Stores`` factory: a *supplier* names the store and picks
its implementation (persistent RocksDB or in-memory) and time parameters; a
*builder* adds serdes and changelog settings and is what
``Topology.add_state_store`` takes::

    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.int64())
    topology.add_state_store(builder, "my-processor")

Serdes left as None are the application's defaults. Logging (a changelog topic
``<application_id>-<store>-changelog``) is on unless disabled; the topic configs
follow SEMANTICS §7 (:meth:`StoreBuilder.changelog_config`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar

from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import ConfigError, TopologyError
from airflow_stateful_provider.streams.state.common.kind import StoreKind
from airflow_stateful_provider.streams.state.keyvalue.kind import KEY_VALUE
from airflow_stateful_provider.streams.state.session.kind import SESSION
from airflow_stateful_provider.streams.state.versioned.kind import VERSIONED

__all__ = [
    "KeyValueBytesStoreSupplier",
    "KeyValueStoreBuilder",
    "SessionBytesStoreSupplier",
    "SessionStoreBuilder",
    "StoreBuilder",
    "Stores",
    "VersionedBytesStoreSupplier",
    "VersionedKeyValueStoreBuilder",
    "changelog_topic_name",
]

#: Added to a windowed/versioned store's retention for its changelog (Kafka's default
#: ``windowstore.changelog.additional.retention.ms``).
CHANGELOG_ADDITIONAL_RETENTION_MS = 86_400_000


def changelog_topic_name(application_id: str, store_name: str) -> str:
    """``<application_id>-<store>-changelog`` (SEMANTICS §7)."""
    return f"{application_id}-{store_name}-changelog"


def _check_store_name(name: Any) -> str:
    if not isinstance(name, str) or not name or any(c.isspace() for c in name) or "/" in name:
        raise TopologyError(f"store name must be a non-empty string without spaces or '/', got {name!r}")
    return name


# ---------------------------------------------------------------------- suppliers


@dataclasses.dataclass(frozen=True)
class KeyValueBytesStoreSupplier:
    name: str
    persistent: bool = True

    def __post_init__(self) -> None:
        _check_store_name(self.name)


@dataclasses.dataclass(frozen=True)
class SessionBytesStoreSupplier:
    name: str
    retention_ms: int
    persistent: bool = True

    def __post_init__(self) -> None:
        _check_store_name(self.name)
        if self.retention_ms <= 0:
            raise ConfigError(f"session store {self.name!r} retention must be > 0 ms, got {self.retention_ms}")


@dataclasses.dataclass(frozen=True)
class VersionedBytesStoreSupplier:
    name: str
    history_retention_ms: int
    segment_interval_ms: int | None = None
    persistent: bool = True

    def __post_init__(self) -> None:
        _check_store_name(self.name)
        if self.history_retention_ms < 0:
            raise ConfigError(
                f"versioned store {self.name!r} history retention must be >= 0 ms, got {self.history_retention_ms}"
            )
        if self.segment_interval_ms is not None and self.segment_interval_ms < 1:
            raise ConfigError(
                f"versioned store {self.name!r} segment interval must be >= 1 ms, got {self.segment_interval_ms}"
            )


# ---------------------------------------------------------------------- builders


@dataclasses.dataclass
class StoreBuilder:
    """Common part of the three builders. ``store_type`` says which store it builds."""

    name: str
    key_serde: Any = None
    value_serde: Any = None
    persistent: bool = True
    logging_enabled: bool = True
    log_config: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Write-back record cache (state/session/caching.py); honoured by session stores.
    caching_enabled: bool = False

    kind: ClassVar[StoreKind]  # the kind of store it builds

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

    def changelog_config(self) -> dict[str, str]:
        """Topic configs of this store's changelog (SEMANTICS §7), user overrides last."""
        config = {"message.timestamp.type": "CreateTime", **self._base_changelog_config()}
        config.update(self.log_config)
        return config

    def metadata_kwargs(self) -> dict[str, Any]:
        """Time parameters for reports and tools (retention and such)."""
        return {}


@dataclasses.dataclass
class KeyValueStoreBuilder(StoreBuilder):
    kind = KEY_VALUE

    def _base_changelog_config(self) -> dict[str, str]:
        return {"cleanup.policy": "compact"}


@dataclasses.dataclass
class SessionStoreBuilder(StoreBuilder):
    retention_ms: int = 0
    inactivity_gap_ms: int | None = None
    grace_period_ms: int | None = None
    #: keep sessions indexed by end too (state/session/index.py): set for the stores of
    #: emit-on-window-close aggregations, as Kafka gives them its time-ordered session store
    time_index: bool = False

    kind = SESSION

    def _base_changelog_config(self) -> dict[str, str]:
        return {
            "cleanup.policy": "compact,delete",
            "retention.ms": str(self.retention_ms + CHANGELOG_ADDITIONAL_RETENTION_MS),
        }

    def metadata_kwargs(self) -> dict[str, Any]:
        return {"retention_ms": self.retention_ms}


@dataclasses.dataclass
class VersionedKeyValueStoreBuilder(StoreBuilder):
    history_retention_ms: int = 0
    segment_interval_ms: int | None = None

    kind = VERSIONED

    def _base_changelog_config(self) -> dict[str, str]:
        return {
            "cleanup.policy": "compact",
            "min.compaction.lag.ms": str(self.history_retention_ms + CHANGELOG_ADDITIONAL_RETENTION_MS),
        }

    def metadata_kwargs(self) -> dict[str, Any]:
        return {"history_retention_ms": self.history_retention_ms}


class Stores:
    """Factory in the shape of Kafka Streams' ``Stores`` (snake_case)."""

    @staticmethod
    def persistent_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        return KeyValueBytesStoreSupplier(name, persistent=True)

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        return KeyValueBytesStoreSupplier(name, persistent=False)

    @staticmethod
    def persistent_session_store(name: str, retention_period: int | timedelta) -> SessionBytesStoreSupplier:
        return SessionBytesStoreSupplier(name, duration_ms(retention_period, "retention_period"), persistent=True)

    @staticmethod
    def in_memory_session_store(name: str, retention_period: int | timedelta) -> SessionBytesStoreSupplier:
        return SessionBytesStoreSupplier(name, duration_ms(retention_period, "retention_period"), persistent=False)

    @staticmethod
    def persistent_versioned_key_value_store(
        name: str,
        history_retention: int | timedelta,
        segment_interval: int | timedelta | None = None,
    ) -> VersionedBytesStoreSupplier:
        return _versioned_supplier(name, history_retention, segment_interval, persistent=True)

    @staticmethod
    def in_memory_versioned_key_value_store(
        name: str,
        history_retention: int | timedelta,
        segment_interval: int | timedelta | None = None,
    ) -> VersionedBytesStoreSupplier:
        return _versioned_supplier(name, history_retention, segment_interval, persistent=False)

    @staticmethod
    def key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier, key_serde: Any = None, value_serde: Any = None
    ) -> KeyValueStoreBuilder:
        if not isinstance(supplier, KeyValueBytesStoreSupplier):
            raise TopologyError(f"key_value_store_builder needs a key-value store supplier, got {supplier!r}")
        return KeyValueStoreBuilder(supplier.name, key_serde, value_serde, supplier.persistent)

    @staticmethod
    def session_store_builder(
        supplier: SessionBytesStoreSupplier, key_serde: Any = None, value_serde: Any = None
    ) -> SessionStoreBuilder:
        if not isinstance(supplier, SessionBytesStoreSupplier):
            raise TopologyError(f"session_store_builder needs a session store supplier, got {supplier!r}")
        return SessionStoreBuilder(
            supplier.name, key_serde, value_serde, supplier.persistent, retention_ms=supplier.retention_ms
        )

    @staticmethod
    def versioned_key_value_store_builder(
        supplier: VersionedBytesStoreSupplier, key_serde: Any = None, value_serde: Any = None
    ) -> VersionedKeyValueStoreBuilder:
        if not isinstance(supplier, VersionedBytesStoreSupplier):
            raise TopologyError(
                f"versioned_key_value_store_builder needs a versioned store supplier, got {supplier!r}"
            )
        return VersionedKeyValueStoreBuilder(
            supplier.name,
            key_serde,
            value_serde,
            supplier.persistent,
            history_retention_ms=supplier.history_retention_ms,
            segment_interval_ms=supplier.segment_interval_ms,
        )


def store_directory(task_dir: str, store_name: str) -> str:
    """Where a persistent store of a task lives: ``<task dir>/<store name>``."""
    return os.path.join(task_dir, store_name)


def _versioned_supplier(name: str, history_retention: int | timedelta, segment_interval: int | timedelta | None,
                        *, persistent: bool) -> VersionedBytesStoreSupplier:
    return VersionedBytesStoreSupplier(
        name,
        duration_ms(history_retention, "history_retention"),
        None if segment_interval is None else duration_ms(segment_interval, "segment_interval"),
        persistent=persistent,
    )
