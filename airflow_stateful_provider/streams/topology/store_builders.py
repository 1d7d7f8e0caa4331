"""``Stores``: the factory of store suppliers and builders, in the shape of Kafka Streams'.

A *supplier* names the store and picks its implementation (persistent RocksDB or
in-memory) and time parameters; a *builder* adds serdes and changelog settings and is
what ``Topology.add_state_store`` takes. Both belong to the store's kind
(``state/<kind>/builder.py``), whose builder also builds the store for each task::

    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.int64())
    topology.add_state_store(builder, "my-processor")

Serdes left as None are the application's defaults. Logging (a changelog topic
``<application_id>-<store>-changelog``) is on unless disabled; the topic configs
follow docs/semantics.md §7 (:meth:`StoreBuilder.changelog_config`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.state.keyvalue.builder import KeyValueBytesStoreSupplier, KeyValueStoreBuilder
from airflow_stateful_provider.streams.state.session.builder import SessionBytesStoreSupplier, SessionStoreBuilder
from airflow_stateful_provider.streams.state.versioned.builder import (
    VersionedBytesStoreSupplier,
    VersionedKeyValueStoreBuilder,
)

__all__ = ["Stores", "changelog_topic_name"]


def changelog_topic_name(application_id: str, store_name: str) -> str:
    """``<application_id>-<store>-changelog`` (docs/semantics.md §7)."""
    return f"{application_id}-{store_name}-changelog"


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


def _versioned_supplier(name: str, history_retention: int | timedelta, segment_interval: int | timedelta | None,
                        *, persistent: bool) -> VersionedBytesStoreSupplier:
    return VersionedBytesStoreSupplier(
        name,
        duration_ms(history_retention, "history_retention"),
        None if segment_interval is None else duration_ms(segment_interval, "segment_interval"),
        persistent=persistent,
    )
