"""``open_store``: open any store directory from its metadata, without the topology.

Used by the maintenance operators, the ``stateful-streams stores`` CLI and tests.
``read_only=True`` opens the RocksDB as a secondary instance, which works while the
application's process holds the store open for writing (it sees what that process
last flushed; call ``refresh()`` to catch up).
"""

from __future__ import annotations

import os

from airflow_stateful_provider.streams.errors import InvalidStoreError
from airflow_stateful_provider.streams.state.common.kind import store_kind, store_kinds
from airflow_stateful_provider.streams.state.common.metadata import METADATA_FILE_NAME, read_metadata
from airflow_stateful_provider.streams.state.common.rocks import RocksDBStore

__all__ = ["find_stores", "find_unrecognized_stores", "open_store"]


def open_store(
    path: str | os.PathLike[str],
    read_only: bool = False,
    *,
    expected_type: str | None = None,
) -> RocksDBStore:
    """Open the store at ``path`` as its metadata describes it (with the RocksDB store of the
    kind its ``store_type`` names).

    ``expected_type`` (optional, a ``store_type`` such as "session") makes opening a directory
    of another store type an error instead of a surprise. Missing or invalid metadata and
    unknown format versions raise :class:`InvalidStoreError` before anything is created or
    modified.
    """
    path = os.fspath(path)
    metadata = read_metadata(path)
    if expected_type is not None:
        known = [kind.store_type for kind in store_kinds()]
        if expected_type not in known:
            raise InvalidStoreError(f"unknown expected_type {expected_type!r}; expected one of {known}")
        if metadata.store_type != expected_type:
            raise InvalidStoreError(f"{path} holds a {metadata.store_type!r} store, not a {expected_type!r} store")
    store_class = store_kind(metadata.store_type).persistent_store
    if store_class is None:
        raise InvalidStoreError(f"{path}: {metadata.store_type!r} stores are never persistent, yet it holds one")
    # Every kind's store class opens a directory with these keywords; RocksDBStore.__init__ itself
    # takes the requested metadata instead, which is all mypy sees of type[RocksDBStore].
    return store_class(path, name=metadata.name, key_serde=metadata.key_serde,  # type: ignore[call-arg]
                       value_serde=metadata.value_serde, read_only=read_only)


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


def _files(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _holds_rocksdb(files: list[str]) -> bool:
    return "CURRENT" in files and any(name.startswith("MANIFEST-") for name in files)


def find_unrecognized_stores(state_dir: str | os.PathLike[str]) -> list[str]:
    """Every directory under ``state_dir`` that holds a RocksDB database (itself, or in the
    ``rocksdb/`` folder where this engine keeps it) without store metadata: another program's
    store (Kafka Streams' own ``<task>/rocksdb/<store>``), or one whose metadata was lost.
    :func:`open_store` refuses them; a listing should say so rather than skip them. Sorted."""
    found = []
    for root, dirs, files in os.walk(os.fspath(state_dir)):
        if METADATA_FILE_NAME in files:
            dirs[:] = []
        elif _holds_rocksdb(files) or ("rocksdb" in dirs and _holds_rocksdb(_files(os.path.join(root, "rocksdb")))):
            found.append(root)
            dirs[:] = []
        else:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
    return sorted(found)
