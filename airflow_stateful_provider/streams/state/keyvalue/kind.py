"""The key-value kind, as the registry knows it (common/kind.py)."""

from __future__ import annotations

from airflow_stateful_provider.streams.state.common.kind import StoreKind, register_store_kind
from airflow_stateful_provider.streams.state.keyvalue.rocksdb import RocksDBKeyValueStore
from airflow_stateful_provider.streams.state.keyvalue.store import METADATA

__all__ = ["KEY_VALUE"]

KEY_VALUE = register_store_kind(StoreKind("key_value", METADATA, RocksDBKeyValueStore))
