"""The key-value store on RocksDB.

RocksDB layout: the record key is the RocksDB key, the value the RocksDB value,
nothing else. The changelog record is the same key and value (None = tombstone).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import ClassVar

import rocksdict

from airflow_stateful_provider.streams.errors import InvalidStoreError, ReadOnlyStoreError
from airflow_stateful_provider.streams.serdes import serde_name
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.maintenance import StoreStats
from airflow_stateful_provider.streams.state.common.metadata import StoreMetadata
from airflow_stateful_provider.streams.state.common.rocks import RocksDBStore, restores_directly
from airflow_stateful_provider.streams.state.common.rocksdb_memory import RocksDBMemory
from airflow_stateful_provider.streams.state.keyvalue.changelog_batch import fill_write_batch
from airflow_stateful_provider.streams.state.keyvalue.store import (
    METADATA,
    KeyValueStoreBase,
    bad_key,
    bad_value,
)

__all__ = ["RocksDBKeyValueStore"]


class RocksDBKeyValueStore(RocksDBStore, KeyValueStoreBase):
    """Persistent key-value store on RocksDB."""

    store_type: ClassVar[str] = METADATA.store_type

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        key_serde: object = "bytes",
        value_serde: object = "bytes",
        read_only: bool = False,
        transactional: bool = False,
        rocksdb_memory: RocksDBMemory | None = None,
    ) -> None:
        requested = StoreMetadata(
            store_type=self.store_type,
            name=name or os.path.basename(os.path.abspath(os.fspath(path))),
            key_serde=serde_name(key_serde),
            value_serde=serde_name(value_serde),
        )
        super().__init__(path, requested, read_only=read_only, transactional=transactional,
                         rocksdb_memory=rocksdb_memory)
        self._get = self._db.get
        self._put = self._db.put
        self._del = self._db.delete

    def get(self, key: bytes) -> bytes | None:
        if type(key) is not bytes:
            raise bad_key(key)
        try:
            value: bytes | None = self._get(key)
        except rocksdict.DbClosedError:
            raise InvalidStoreError(f"store {self.name!r} is closed") from None
        return value

    def put(self, key: bytes, value: bytes | None) -> None:
        if type(key) is not bytes:
            raise bad_key(key)
        if self.read_only:
            raise ReadOnlyStoreError(f"store {self.name!r} at {self.path} was opened read-only")
        try:
            if value is None:
                self._del(key)
            elif type(value) is bytes:
                self._put(key, value)
            else:
                raise bad_value(value)
        except rocksdict.DbClosedError:
            raise InvalidStoreError(f"store {self.name!r} is closed") from None

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply all entries in one RocksDB write batch (a transactional store: into its buffer).
        Nothing is written when an entry is invalid."""
        self._check_writable()
        checked = list(entries)
        for key, value in checked:
            if type(key) is not bytes:
                raise bad_key(key)
            if value is not None and type(value) is not bytes:
                raise bad_value(value)
        batch = None if self._txn is not None else rocksdict.WriteBatch(raw_mode=True)
        put, delete = (self._put, self._del) if batch is None else (batch.put, batch.delete)
        for key, value in checked:
            if value is None:
                delete(key)
            else:
                put(key, value)
        if batch is not None:
            self._db.write(batch)

    def _forward(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        it, _bound = (self._db.iter(), None) if to_key is None else self._iter_below(to_key + b"\x00")
        if from_key is None:
            it.seek_to_first()
        else:
            it.seek(from_key)
        while it.valid():
            key = it.key()
            if to_key is not None and key > to_key:
                break
            yield key, it.value()
            it.next()

    def _backward(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()  # not bounded below: rocksdict 0.3.29 sets the upper bound for a lower one
        if to_key is None:
            it.seek_to_last()
        else:
            it.seek_for_prev(to_key)
        while it.valid():
            key = it.key()
            if from_key is not None and key < from_key:
                break
            yield key, it.value()
            it.prev()

    def approximate_num_entries(self) -> int:
        """RocksDB's estimate of the number of keys (cheap; may be off after deletes)."""
        self._check_open()
        return self._rocksdb_int("rocksdb.estimate-num-keys")

    @restores_directly
    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int:
        """Apply changelog records in one write batch; returns how many were applied.

        Records with a null key are skipped (docs/semantics.md §2).
        """
        self._check_writable()
        batch = rocksdict.WriteBatch(raw_mode=True)
        applied = fill_write_batch(batch, records)
        self._db.write(batch)
        return applied

    def stats(self) -> StoreStats:
        self._check_open()
        return StoreStats(
            store_type=self.store_type,
            name=self.name,
            path=self.path,
            approximate_num_entries=self.approximate_num_entries(),
            bytes_on_disk=self.bytes_on_disk(),
        )
