"""The versioned kind, as the registry knows it (common/kind.py): retention and compaction
act on its stores."""

from __future__ import annotations

from airflow_stateful_provider.streams.state.common.kind import StoreKind, register_store_kind
from airflow_stateful_provider.streams.state.versioned.rocksdb import RocksDBVersionedKeyValueStore
from airflow_stateful_provider.streams.state.versioned.store import METADATA

__all__ = ["VERSIONED"]

VERSIONED = register_store_kind(StoreKind("versioned", METADATA, RocksDBVersionedKeyValueStore, maintainable=True))
