"""The counter stores: per key a signed 64-bit total, on RocksDB or in memory.

Both hold ``key bytes -> total`` (8 bytes big-endian in RocksDB); ``add(key, delta)``
returns the new total, and the changelog carries that total, so restoring a changelog
is writing its last total per key.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from typing import ClassVar

from airflow_stateful_provider.streams.errors import InvalidRecordError
from airflow_stateful_provider.streams.serdes import serde_name
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.maintenance import StoreStats
from airflow_stateful_provider.streams.state.common.memory import InMemoryStore
from airflow_stateful_provider.streams.state.common.metadata import MetadataKind, StoreMetadata
from airflow_stateful_provider.streams.state.common.rocks import RocksDBStore, restores_directly

__all__ = ["METADATA", "InMemoryCounterStore", "RocksDBCounterStore"]

#: A counter store directory's metadata: the common fields only.
METADATA = MetadataKind("counter")
TOTAL = struct.Struct(">q")


def _check(key: object, delta: object = 0) -> None:
    if type(key) is not bytes:
        raise InvalidRecordError(f"counter keys must be bytes, got {type(key).__name__} {key!r:.80}")
    if type(delta) is not int or not -(1 << 63) <= delta < (1 << 63):
        raise InvalidRecordError(f"a counter adds 64-bit ints, got {type(delta).__name__} {delta!r:.80}")


def _changes(records: Iterable[ChangelogRecord]) -> Iterator[tuple[bytes, bytes | None]]:
    """(key, total bytes or None) of each keyed changelog record, checked."""
    for record in records:
        if record.key is None:
            continue
        if type(record.key) is not bytes or not (record.value is None or len(record.value) == TOTAL.size):
            raise InvalidRecordError(f"counter changelog record at offset {record.offset} needs a bytes key and "
                                     f"an 8-byte total or None: {record.key!r:.60} -> {record.value!r:.60}")
        yield record.key, record.value


class RocksDBCounterStore(RocksDBStore):
    """Counters in RocksDB (transactional under exactly-once, like every RocksDB store)."""

    store_type: ClassVar[str] = METADATA.store_type

    def __init__(self, path: str | os.PathLike[str], *, name: str | None = None, key_serde: object = "bytes",
                 value_serde: object = "int64", read_only: bool = False, transactional: bool = False) -> None:
        requested = StoreMetadata(self.store_type, name or os.path.basename(os.path.abspath(os.fspath(path))),
                                  serde_name(key_serde), serde_name(value_serde))
        super().__init__(path, requested, read_only=read_only, transactional=transactional)

    def get(self, key: bytes) -> int | None:
        _check(key)
        self._check_open()
        raw = self._db.get(key)
        return None if raw is None else TOTAL.unpack(raw)[0]

    def add(self, key: bytes, delta: int) -> int:
        _check(key, delta)
        self._check_writable()
        raw = self._db.get(key)
        total = delta + (0 if raw is None else TOTAL.unpack(raw)[0])
        self._db.put(key, TOTAL.pack(total))
        return total

    def all(self) -> Iterator[tuple[bytes, int]]:
        self._check_open()
        it = self._db.iter()
        it.seek_to_first()
        while it.valid():
            yield it.key(), TOTAL.unpack(it.value())[0]
            it.next()

    @restores_directly
    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int:
        self._check_writable()
        applied = 0
        for key, total in _changes(records):
            if total is None:
                self._db.delete(key)
            else:
                self._db.put(key, total)
            applied += 1
        return applied

    def stats(self) -> StoreStats:
        self._check_open()
        return StoreStats(self.store_type, self.name, self.path, self._rocksdb_int("rocksdb.estimate-num-keys"),
                          self.bytes_on_disk())


class InMemoryCounterStore(InMemoryStore):
    """Counters in a dict."""

    store_type: ClassVar[str] = METADATA.store_type

    def __init__(self, name: str, *, key_serde: object = "bytes", value_serde: object = "int64") -> None:
        super().__init__(name, key_serde=key_serde, value_serde=value_serde)
        self._totals: dict[bytes, int] = {}

    def get(self, key: bytes) -> int | None:
        _check(key)
        self._check_open()
        return self._totals.get(key)

    def add(self, key: bytes, delta: int) -> int:
        _check(key, delta)
        self._check_open()
        total = self._totals[key] = self._totals.get(key, 0) + delta
        return total

    def all(self) -> Iterator[tuple[bytes, int]]:
        self._check_open()
        return iter(sorted(self._totals.items()))

    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int:
        self._check_open()
        applied = 0
        for key, total in _changes(records):
            if total is None:
                self._totals.pop(key, None)
            else:
                self._totals[key] = TOTAL.unpack(total)[0]
            applied += 1
        return applied

    def stats(self) -> StoreStats:
        return StoreStats(self.store_type, self.name, None, len(self._totals), 0)

    def close(self) -> None:
        self._totals.clear()
        super().close()
