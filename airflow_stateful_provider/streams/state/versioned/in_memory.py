"""The versioned key-value store in memory: per key a sorted timeline of versions, with the
same segment-based expiry as the RocksDB store so both answer alike (docs/semantics.md §5)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any, ClassVar

from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.maintenance import StoreStats
from airflow_stateful_provider.streams.state.common.memory import InMemoryStore
from airflow_stateful_provider.streams.state.versioned.store import (
    METADATA,
    VALID_TO_UNDEFINED,
    VersionedRecord,
    VersionedStoreBase,
    check_key,
    check_time,
    history_retention_ms,
    segment_interval_ms,
)

__all__ = ["InMemoryVersionedKeyValueStore"]


class InMemoryVersionedKeyValueStore(InMemoryStore, VersionedStoreBase):
    """Non-persistent versioned store: per key sorted lists of valid_from and values.

    Expiry follows the RocksDB store exactly (a non-newest version goes when the segment of
    its valid_to dies), so both answer every query the same way.
    """

    store_type: ClassVar[str] = METADATA.store_type

    def __init__(
        self,
        history_retention: int | Any,
        name: str = "in-memory-versioned",
        *,
        segment_interval: int | Any | None = None,
        key_serde: object = "bytes",
        value_serde: object = "bytes",
    ) -> None:
        hr_ms = history_retention_ms(history_retention)
        interval_ms = segment_interval_ms(segment_interval, hr_ms)
        super().__init__(name, key_serde=key_serde, value_serde=value_serde)
        self.history_retention_ms = hr_ms
        self._init_segments(hr_ms, interval_ms)
        self._versions: dict[bytes, tuple[list[int], list[bytes | None]]] = {}

    def _expire(self, min_live: int) -> None:
        """Forget versions whose valid_to segment is dead (never the newest)."""
        cutoff = min_live * self.segment_interval_ms  # valid_to below this: dead segment
        for key in list(self._versions):
            froms, values = self._versions[key]
            # version i (not newest) is dead when froms[i + 1] < cutoff
            dead = bisect.bisect_left(froms, cutoff, 1) - 1
            if dead > 0:
                del froms[:dead]
                del values[:dead]
            if len(froms) == 1 and values[0] is None and froms[0] < cutoff:
                del self._versions[key]  # a lone newest tombstone in a dead segment

    def _do_put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        entry = self._versions.get(key)
        if entry is None:
            self._versions[key] = ([timestamp], [value])
            return VALID_TO_UNDEFINED
        froms, values = entry
        index = bisect.bisect_left(froms, timestamp)
        if index < len(froms) and froms[index] == timestamp:
            values[index] = value
        else:
            froms.insert(index, timestamp)
            values.insert(index, value)
        return froms[index + 1] if index + 1 < len(froms) else VALID_TO_UNDEFINED

    def _retained_from(self, froms: list[int]) -> int:
        """Index of the oldest version still retained (its valid_to segment is live)."""
        cutoff = self._min_live * self.segment_interval_ms
        return max(bisect.bisect_left(froms, cutoff, 1) - 1, 0)

    def get(self, key: bytes, as_of: int | None = None) -> VersionedRecord[bytes] | None:
        check_key(key)
        check_time(as_of, "as_of")
        self._check_open()
        entry = self._versions.get(key)
        if entry is None:
            return None
        froms, values = entry
        newest_value = values[-1]
        if as_of is None:
            return None if newest_value is None else VersionedRecord(newest_value, froms[-1], None)
        if froms[-1] <= as_of:
            return None if newest_value is None else VersionedRecord(newest_value, froms[-1], None)
        if as_of < self._observed - self.history_retention_ms:
            return None
        index = bisect.bisect_right(froms, as_of) - 1
        value = values[index]
        if index < self._retained_from(froms) or value is None:
            return None
        return VersionedRecord(value, froms[index], froms[index + 1])

    def get_versions(
        self, key: bytes, from_time: int | None = None, to_time: int | None = None, ascending: bool = False
    ) -> list[VersionedRecord[bytes]]:
        lo, hi = self._version_range(key, from_time, to_time)
        entry = self._versions.get(key)
        if entry is None or lo > hi:
            return []
        froms, values = entry
        last = len(froms) - 1
        result = []
        first = last if hi < self._observed - self.history_retention_ms else self._retained_from(froms)
        for index in range(first, last + 1):
            value = values[index]
            valid_from = froms[index]
            if value is None or valid_from > hi:
                continue
            valid_to = froms[index + 1] if index < last else None
            if valid_to is None or valid_to > lo:
                result.append(VersionedRecord(value, valid_from, valid_to))
        if not ascending:
            result.reverse()
        return result

    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int:
        """Replay changelog records, applying the retention cut-off markers among them where
        they stand (common/cutoff.py). Returns how many records were applied."""
        self._check_open()
        return self._restore_runs(records, self._restore_run)

    def _restore_run(self, records: Iterable[ChangelogRecord]) -> int:
        self._check_open()
        return self._replay(records)

    def _live_segment_ids(self) -> list[int]:
        """Segments the RocksDB store would hold rows in for the current versions."""
        interval = self.segment_interval_ms
        ids = set()
        for froms, values in self._versions.values():
            for index in range(len(froms) - 1):
                ids.add(froms[index + 1] // interval)
            if values[-1] is None:
                ids.add(froms[-1] // interval)
        return sorted(ids)

    def stats(self) -> StoreStats:
        return self._segment_stats(None, sum(len(f) for f, _ in self._versions.values()), 0)

    def close(self) -> None:
        self._versions.clear()
        super().close()
