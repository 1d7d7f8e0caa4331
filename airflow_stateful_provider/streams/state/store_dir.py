"""``open_store``: open any store directory from its metadata, without the topology.

Used by the maintenance operators, the ``stateful-streams stores`` CLI and tests.
``read_only=True`` opens the RocksDB as a secondary instance, which works while the
application's process holds the store open for writing (it sees what that process
last flushed; call ``refresh()`` to catch up).
"""

from __future__ import annotations

import os

from airflow_stateful_provider.streams.errors import InvalidStoreError
from airflow_stateful_provider.streams.state.common.metadata import (
    METADATA_FILE_NAME,
    StoreMetadata,
    StoreType,
    read_metadata,
)
from airflow_stateful_provider.streams.state.keyvalue import RocksDBKeyValueStore
from airflow_stateful_provider.streams.state.session import RocksDBSessionStore
from airflow_stateful_provider.streams.state.versioned.rocksdb import RocksDBVersionedKeyValueStore

__all__ = ["PersistentStore", "find_stores", "open_store"]

PersistentStore = RocksDBKeyValueStore | RocksDBSessionStore | RocksDBVersionedKeyValueStore


def open_store(
    path: str | os.PathLike[str],
    read_only: bool = False,
    *,
    expected_type: StoreType | str | None = None,
) -> PersistentStore:
    """Open the store at ``path`` as its metadata describes it.

    ``expected_type`` (optional) makes opening a directory of another store type an error
    instead of a surprise. Missing or invalid metadata and unknown format versions raise
    :class:`InvalidStoreError` before anything is created or modified.
    """
    path = os.fspath(path)
    metadata = read_metadata(path)
    if expected_type is not None:
        try:
            wanted = StoreType(expected_type)
        except ValueError:
            raise InvalidStoreError(
                f"unknown expected_type {expected_type!r}; expected one of {[t.value for t in StoreType]}"
            ) from None
        if metadata.store_type is not wanted:
            raise InvalidStoreError(
                f"{path} holds a {metadata.store_type.value!r} store, not a {wanted.value!r} store"
            )
    return _open(path, metadata, read_only)


def _open(path: str, metadata: StoreMetadata, read_only: bool) -> PersistentStore:
    common = {
        "name": metadata.name,
        "key_serde": metadata.key_serde,
        "value_serde": metadata.value_serde,
        "read_only": read_only,
    }
    if metadata.store_type is StoreType.KEY_VALUE:
        return RocksDBKeyValueStore(path, **common)  # type: ignore[arg-type]
    if metadata.store_type is StoreType.SESSION:
        return RocksDBSessionStore(path, metadata.retention_ms, **common)  # type: ignore[arg-type]
    return RocksDBVersionedKeyValueStore(
        path,
        metadata.history_retention_ms,
        segment_interval=metadata.segment_interval_ms,
        **common,  # type: ignore[arg-type]
    )


def find_stores(state_dir: str | os.PathLike[str]) -> list[str]:
    """Every store directory (one holding store metadata) under ``state_dir``, sorted."""
    found = []
    for root, dirs, files in os.walk(os.fspath(state_dir)):
        if METADATA_FILE_NAME in files:
            found.append(root)
            dirs[:] = []  # a store's own folders hold no further stores
        else:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
    return sorted(found)
