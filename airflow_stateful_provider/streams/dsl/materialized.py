"""Materialized: how a table or aggregation stores its state, and the store builder it becomes."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any, TypeVar

from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.serdes import check_serde
from airflow_stateful_provider.streams.state.common.builder import StoreBuilder
from airflow_stateful_provider.streams.state.keyvalue.builder import KeyValueStoreBuilder
from airflow_stateful_provider.streams.state.session.builder import SessionStoreBuilder
from airflow_stateful_provider.streams.state.versioned.builder import VersionedKeyValueStoreBuilder
from airflow_stateful_provider.streams.windows import SessionWindows

__all__ = ["Materialized", "key_value_store_builder", "session_store_builder"]


@dataclasses.dataclass(frozen=True)
class Materialized:
    """How a table or aggregation stores its state.

    ``Materialized.as_("name")`` names the store (queryable from the test driver);
    ``Materialized.as_versioned("name", history_retention)`` makes a table versioned
    (docs/semantics.md §5). ``store_type`` "rocksdb" or "in_memory" overrides the config's
    ``default_dsl_store``. ``retention`` applies to session stores (default gap + grace).
    """

    store_name: str | None = None
    key_serde: Any = None
    value_serde: Any = None
    store_type: str | None = None
    retention_ms: int | None = None
    versioned_history_retention_ms: int | None = None
    versioned_segment_interval_ms: int | None = None
    logging_enabled: bool = True
    #: DSL stores cache by default, as in Kafka Streams (state/session/caching.py).
    caching_enabled: bool = True
    log_config: tuple[tuple[str, str], ...] = ()
    #: Key-value stores (tables, aggregations): keys not updated for this long are deleted
    #: (state/keyvalue/ttl.py, docs/maintenance.md "Key-value TTL").
    time_to_live_ms: int | None = None

    def __post_init__(self) -> None:
        if self.store_type not in (None, "rocksdb", "in_memory"):
            raise TopologyError(f"Materialized store_type must be 'rocksdb' or 'in_memory', got {self.store_type!r}")
        check_serde(self.key_serde, "Materialized key_serde")
        check_serde(self.value_serde, "Materialized value_serde")

    @classmethod
    def as_(cls, store_name: str) -> Materialized:
        return cls(store_name=store_name)

    @classmethod
    def as_versioned(
        cls,
        store_name: str,
        history_retention: int | timedelta,
        segment_interval: int | timedelta | None = None,
    ) -> Materialized:
        return cls(
            store_name=store_name,
            versioned_history_retention_ms=duration_ms(history_retention, "history_retention", minimum=0),
            versioned_segment_interval_ms=(
                None if segment_interval is None else duration_ms(segment_interval, "segment_interval", minimum=1)
            ),
        )

    @classmethod
    def with_(cls, key_serde: Any = None, value_serde: Any = None) -> Materialized:
        return cls(key_serde=key_serde, value_serde=value_serde)

    def with_key_serde(self, serde: Any) -> Materialized:
        return dataclasses.replace(self, key_serde=serde)

    def with_value_serde(self, serde: Any) -> Materialized:
        return dataclasses.replace(self, value_serde=serde)

    def with_store_type(self, store_type: str) -> Materialized:
        return dataclasses.replace(self, store_type=store_type)

    def with_retention(self, retention: int | timedelta) -> Materialized:
        return dataclasses.replace(self, retention_ms=duration_ms(retention, "retention", minimum=1))

    def with_time_to_live(self, time_to_live: int | timedelta) -> Materialized:
        """Delete a key not updated for ``time_to_live`` of stream time (a changelog tombstone
        and, for a table, a delete downstream); maintenance runs also expire by their ``now``.
        Key-value stores only (not versioned or session stores)."""
        return dataclasses.replace(self, time_to_live_ms=duration_ms(time_to_live, "time_to_live", minimum=1))

    def with_logging_disabled(self) -> Materialized:
        return dataclasses.replace(self, logging_enabled=False, log_config=())

    def with_caching_disabled(self) -> Materialized:
        """Forward every update at once instead of the latest per key at each commit."""
        return dataclasses.replace(self, caching_enabled=False)

    def with_caching_enabled(self) -> Materialized:
        return dataclasses.replace(self, caching_enabled=True)

    def with_logging_enabled(self, config: dict[str, str] | None = None) -> Materialized:
        return dataclasses.replace(
            self, logging_enabled=True, log_config=tuple((str(k), str(v)) for k, v in (config or {}).items())
        )

    @property
    def is_versioned(self) -> bool:
        return self.versioned_history_retention_ms is not None


def key_value_store_builder(
    materialized: Materialized, store_name: str, key_serde: Any, value_serde: Any, *, table: bool,
) -> KeyValueStoreBuilder | VersionedKeyValueStoreBuilder:
    """The store of a table (``table=True``) or of a key-value aggregation: a versioned one
    when ``Materialized.as_versioned`` asked for it (source tables only)."""
    if not materialized.is_versioned:
        builder = KeyValueStoreBuilder(store_name, key_serde, value_serde)
        builder.time_to_live_ms = materialized.time_to_live_ms
        return _configured(builder, materialized)
    if materialized.time_to_live_ms is not None:
        raise TopologyError(f"store {store_name!r}: a time to live is for key-value stores; a versioned store "
                            f"expires old versions by its history retention")
    if not table:
        raise TopologyError(
            f"store {store_name!r}: a versioned store can only materialize a source table "
            f"(builder.table), not an aggregation"
        )
    return _configured(VersionedKeyValueStoreBuilder(
        store_name, key_serde, value_serde,
        history_retention_ms=materialized.versioned_history_retention_ms or 0,
        segment_interval_ms=materialized.versioned_segment_interval_ms,
    ), materialized)


def session_store_builder(
    materialized: Materialized, store_name: str, key_serde: Any, value_serde: Any, *, retention_ms: int,
    windows: SessionWindows, time_index: bool,
) -> SessionStoreBuilder:
    """The store of a session-windowed aggregation."""
    if materialized.time_to_live_ms is not None:
        raise TopologyError(f"store {store_name!r}: a time to live is for key-value stores; a session store "
                            f"expires sessions by its retention")
    return _configured(SessionStoreBuilder(
        store_name, key_serde, value_serde, retention_ms=retention_ms, inactivity_gap_ms=windows.inactivity_gap_ms,
        grace_period_ms=windows.grace_period_ms, time_index=time_index,
    ), materialized)


_Builder = TypeVar("_Builder", bound=StoreBuilder)


def _configured(builder: _Builder, materialized: Materialized) -> _Builder:
    """What ``materialized`` says of every store: implementation, logging, caching."""
    # None = follow StreamsConfig.default_dsl_store, decided when the task builds the store
    builder.persistent = None if materialized.store_type is None else materialized.store_type == "rocksdb"
    if materialized.logging_enabled:
        builder.with_logging_enabled(dict(materialized.log_config))
    else:
        builder.with_logging_disabled()
    builder.caching_enabled = materialized.caching_enabled
    return builder
