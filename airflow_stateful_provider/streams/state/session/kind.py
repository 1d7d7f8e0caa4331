"""The session kind, as the registry knows it (common/kind.py): retention and compaction act
on its stores."""

from __future__ import annotations

from airflow_stateful_provider.streams.state.common.kind import StoreKind, register_store_kind
from airflow_stateful_provider.streams.state.session.rocksdb import RocksDBSessionStore
from airflow_stateful_provider.streams.state.session.store import METADATA

__all__ = ["SESSION"]

SESSION = register_store_kind(StoreKind("session", METADATA, RocksDBSessionStore, maintainable=True))
