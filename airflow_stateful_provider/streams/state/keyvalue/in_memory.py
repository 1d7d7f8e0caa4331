"""The key-value store in memory: the same answers and errors as the RocksDB one."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import ClassVar

from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.maintenance import StoreStats
from airflow_stateful_provider.streams.state.common.memory import InMemoryStore
from airflow_stateful_provider.streams.state.keyvalue.store import (
    METADATA,
    KeyValueStoreBase,
    bad_key,
    bad_record,
    bad_value,
)

__all__ = ["InMemoryKeyValueStore"]


class InMemoryKeyValueStore(InMemoryStore, KeyValueStoreBase):
    """Non-persistent key-value store: a dict plus a lazily sorted key list for ranges.

    Iterators work on a snapshot of the keys in range taken when iteration starts; a key
    deleted meanwhile is skipped (Kafka's InMemoryKeyValueStore does the same).
    """

    store_type: ClassVar[str] = METADATA.store_type

    def __init__(self, name: str = "in-memory-kv", *, key_serde: object = "bytes",
                 value_serde: object = "bytes") -> None:
        super().__init__(name, key_serde=key_serde, value_serde=value_serde)
        self._map: dict[bytes, bytes] = {}
        self._sorted: list[bytes] | None = []

    def get(self, key: bytes) -> bytes | None:
        if type(key) is not bytes:
            raise bad_key(key)
        self._check_open()
        return self._map.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        if type(key) is not bytes:
            raise bad_key(key)
        self._check_open()
        if value is None:
            if self._map.pop(key, None) is not None:
                self._sorted = None
        elif type(value) is bytes:
            if key not in self._map:
                self._sorted = None
            self._map[key] = value
        else:
            raise bad_value(value)

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
                raise bad_record(record)
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
            store_type=self.store_type,
            name=self.name,
            path=None,
            approximate_num_entries=len(self._map),
            bytes_on_disk=0,
        )
