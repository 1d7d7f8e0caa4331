"""Key-value stores: the ``KeyValueStore`` protocol, RocksDB and in-memory implementations.

Keys and values are bytes (serdes live above, in the runtime); keys sort as
unsigned bytes, like Kafka Streams' ``Bytes``. ``put(key, None)`` deletes, as in
Kafka Streams. Ranges are inclusive at both ends; ``None`` bounds are open.

RocksDB layout: the record key is the RocksDB key, the value the RocksDB value,
nothing else. The changelog record is the same key and value (None = tombstone).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Iterator
from typing import ClassVar, Protocol, runtime_checkable

import rocksdict

from airflow_stateful_provider.streams.errors import InvalidRecordError, InvalidStoreError, ReadOnlyStoreError
from airflow_stateful_provider.streams.serdes import serde_name
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.maintenance import StoreStats
from airflow_stateful_provider.streams.state.common.memory import InMemoryStore
from airflow_stateful_provider.streams.state.common.metadata import StoreMetadata, StoreType
from airflow_stateful_provider.streams.state.common.rocks import RocksDBStore, restores_directly

__all__ = ["InMemoryKeyValueStore", "KeyValueStore", "RocksDBKeyValueStore"]


def _bad_key(key: object) -> InvalidRecordError:
    if key is None:
        return InvalidRecordError("key cannot be null (None)")
    return InvalidRecordError(f"store keys must be bytes, got {type(key).__name__} {key!r:.80}")


def _bad_record(record: ChangelogRecord) -> InvalidRecordError:
    return InvalidRecordError(
        f"changelog record at offset {record.offset} needs bytes key and bytes-or-None value, got "
        f"key {type(record.key).__name__} {record.key!r:.60}, value {type(record.value).__name__}"
    )


def _bad_value(value: object) -> InvalidRecordError:
    return InvalidRecordError(f"store values must be bytes or None, got {type(value).__name__} {value!r:.80}")


@runtime_checkable
class KeyValueStore(Protocol):
    """Kafka Streams' ``KeyValueStore<Bytes, byte[]>`` in snake_case."""

    name: str
    persistent: bool

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes | None) -> None: ...

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None: ...

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None: ...

    def delete(self, key: bytes) -> bytes | None: ...

    def range(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]: ...

    def reverse_range(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]: ...

    def all(self) -> Iterator[tuple[bytes, bytes]]: ...

    def reverse_all(self) -> Iterator[tuple[bytes, bytes]]: ...

    def approximate_num_entries(self) -> int: ...

    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def _check_bound(bound: object, what: str) -> None:
    if bound is not None and type(bound) is not bytes:
        raise InvalidRecordError(f"{what} must be bytes or None, got {type(bound).__name__} {bound!r:.80}")


class _KeyValueCommon:
    """The methods both implementations define the same way on top of ``get``/``put`` and
    their forward and backward scans (``_forward``/``_backward``: inclusive bounds, None
    for an open end)."""

    get: Callable[[bytes], bytes | None]
    put: Callable[[bytes, bytes | None], None]
    _check_open: Callable[[], None]
    _forward: Callable[[bytes | None, bytes | None], Iterator[tuple[bytes, bytes]]]
    _backward: Callable[[bytes | None, bytes | None], Iterator[tuple[bytes, bytes]]]

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        """Put only when ``key`` has no value; returns the existing value (None if it put)."""
        existing = self.get(key)
        if existing is None:
            self.put(key, value)
        return existing

    def delete(self, key: bytes) -> bytes | None:
        """Delete ``key``; returns the value it had."""
        existing = self.get(key)
        if existing is not None:
            self.put(key, None)
        return existing

    def _empty_range(self, from_key: bytes | None, to_key: bytes | None) -> bool:
        """Check the store is open and the bounds are bytes or None; True when from > to."""
        self._check_open()
        _check_bound(from_key, "from_key")
        _check_bound(to_key, "to_key")
        return from_key is not None and to_key is not None and from_key > to_key

    def range(self, from_key: bytes | None = None, to_key: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``from_key <= key <= to_key`` in key order; empty when from > to."""
        if self._empty_range(from_key, to_key):
            return iter(())
        return self._forward(from_key, to_key)

    def reverse_range(
        self, from_key: bytes | None = None, to_key: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Like :meth:`range`, in descending key order."""
        if self._empty_range(from_key, to_key):
            return iter(())
        return self._backward(from_key, to_key)

    def all(self) -> Iterator[tuple[bytes, bytes]]:
        return self.range(None, None)

    def reverse_all(self) -> Iterator[tuple[bytes, bytes]]:
        return self.reverse_range(None, None)


class RocksDBKeyValueStore(RocksDBStore, _KeyValueCommon):
    """Persistent key-value store on RocksDB."""

    store_type: ClassVar[StoreType] = StoreType.KEY_VALUE

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        key_serde: object = "bytes",
        value_serde: object = "bytes",
        read_only: bool = False,
        transactional: bool = False,
    ) -> None:
        requested = StoreMetadata(
            store_type=StoreType.KEY_VALUE,
            name=name or os.path.basename(os.path.abspath(os.fspath(path))),
            key_serde=serde_name(key_serde),
            value_serde=serde_name(value_serde),
        )
        super().__init__(path, requested, read_only=read_only, transactional=transactional)
        self._get = self._db.get
        self._put = self._db.put
        self._del = self._db.delete

    def get(self, key: bytes) -> bytes | None:
        if type(key) is not bytes:
            raise _bad_key(key)
        try:
            return self._get(key)
        except rocksdict.DbClosedError:
            raise InvalidStoreError(f"store {self.name!r} is closed") from None

    def put(self, key: bytes, value: bytes | None) -> None:
        if type(key) is not bytes:
            raise _bad_key(key)
        if self.read_only:
            raise ReadOnlyStoreError(f"store {self.name!r} at {self.path} was opened read-only")
        try:
            if value is None:
                self._del(key)
            elif type(value) is bytes:
                self._put(key, value)
            else:
                raise _bad_value(value)
        except rocksdict.DbClosedError:
            raise InvalidStoreError(f"store {self.name!r} is closed") from None

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply all entries in one RocksDB write batch (a transactional store: into its buffer).
        Nothing is written when an entry is invalid."""
        self._check_writable()
        checked = list(entries)
        for key, value in checked:
            if type(key) is not bytes:
                raise _bad_key(key)
            if value is not None and type(value) is not bytes:
                raise _bad_value(value)
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
        it = self._db.iter()
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
        it = self._db.iter()
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

        Records with a null key are skipped (SEMANTICS §2).
        """
        self._check_writable()
        batch = rocksdict.WriteBatch(raw_mode=True)
        put = batch.put
        delete = batch.delete
        applied = 0
        for record in records:
            key = record.key
            if key is None:
                continue
            value = record.value
            if type(key) is not bytes or (value is not None and type(value) is not bytes):
                raise _bad_record(record)
            if value is None:
                delete(key)
            else:
                put(key, value)
            applied += 1
        self._db.write(batch)
        return applied

    def stats(self) -> StoreStats:
        self._check_open()
        return StoreStats(
            store_type=self.store_type.value,
            name=self.name,
            path=self.path,
            approximate_num_entries=self.approximate_num_entries(),
            bytes_on_disk=self.bytes_on_disk(),
        )


class InMemoryKeyValueStore(InMemoryStore, _KeyValueCommon):
    """Non-persistent key-value store: a dict plus a lazily sorted key list for ranges.

    Iterators work on a snapshot of the keys in range taken when iteration starts; a key
    deleted meanwhile is skipped (Kafka's InMemoryKeyValueStore does the same).
    """

    store_type: ClassVar[StoreType] = StoreType.KEY_VALUE

    def __init__(self, name: str = "in-memory-kv", *, key_serde: object = "bytes", value_serde: object = "bytes") -> None:
        super().__init__(name, key_serde=key_serde, value_serde=value_serde)
        self._map: dict[bytes, bytes] = {}
        self._sorted: list[bytes] | None = []

    def get(self, key: bytes) -> bytes | None:
        if type(key) is not bytes:
            raise _bad_key(key)
        self._check_open()
        return self._map.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        if type(key) is not bytes:
            raise _bad_key(key)
        self._check_open()
        if value is None:
            if self._map.pop(key, None) is not None:
                self._sorted = None
        elif type(value) is bytes:
            if key not in self._map:
                self._sorted = None
            self._map[key] = value
        else:
            raise _bad_value(value)

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def _keys(self) -> list[bytes]:
        if self._sorted is None:
            self._sorted = sorted(self._map)
        return self._sorted

    def _keys_in(self, from_key: bytes | None, to_key: bytes | None) -> list[bytes]:
        keys = self._keys()
        lo = 0 if from_key is None else bisect.bisect_left(keys, from_key)
        hi = len(keys) if to_key is None else bisect.bisect_right(keys, to_key)
        return keys[lo:hi]

    def _iterate(self, keys: list[bytes]) -> Iterator[tuple[bytes, bytes]]:
        data = self._map
        for key in keys:
            value = data.get(key)
            if value is not None:
                yield key, value

    def _forward(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self._iterate(self._keys_in(from_key, to_key))

    def _backward(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self._iterate(self._keys_in(from_key, to_key)[::-1])

    def approximate_num_entries(self) -> int:
        return len(self._map)

    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int:
        self._check_open()
        applied = 0
        data = self._map
        for record in records:
            key = record.key
            if key is None:
                continue
            if type(key) is not bytes or (record.value is not None and type(record.value) is not bytes):
                raise _bad_record(record)
            if record.value is None:
                data.pop(key, None)
            else:
                data[key] = record.value
            applied += 1
        self._sorted = None
        return applied

    def close(self) -> None:
        self._map.clear()
        self._sorted = []
        super().close()

    def stats(self) -> StoreStats:
        return StoreStats(
            store_type=self.store_type.value,
            name=self.name,
            path=None,
            approximate_num_entries=len(self._map),
            bytes_on_disk=0,
        )
