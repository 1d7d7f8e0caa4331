"""The session store in memory: the same segments, visibility and answers as the RocksDB
one (rocksdb.py), with the time index of index.py always on."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.maintenance import StoreStats
from airflow_stateful_provider.streams.state.common.memory import InMemoryStore
from airflow_stateful_provider.streams.state.session.index import SessionEndIndex
from airflow_stateful_provider.streams.state.session.key import SessionKey, session_key_from_bytes
from airflow_stateful_provider.streams.state.session.store import (
    METADATA,
    SessionStoreBase,
    bad_window_error,
    check_key,
    check_times,
    session_retention_ms,
    session_segment_interval,
    short_key_error,
)

__all__ = ["InMemorySessionStore"]

_TS2_PACK = struct.Struct(">qq").pack  # end, start: the changelog key's window


class InMemorySessionStore(InMemoryStore, SessionStoreBase):
    """Non-persistent session store with the same segments and visibility as the RocksDB one.

    Layout: ``{segment id: {key: {(end, start): aggregate}}}``, and the time index
    (index.py) for ``find_sessions_by_end``.
    """

    store_type: ClassVar[str] = METADATA.store_type

    def __init__(
        self,
        retention: int | Any,
        name: str = "in-memory-session",
        *,
        key_serde: object = "bytes",
        value_serde: object = "bytes",
    ) -> None:
        retention_ms = session_retention_ms(retention)
        super().__init__(name, key_serde=key_serde, value_serde=value_serde)
        self.retention_ms = retention_ms
        self._init_segments(retention_ms, session_segment_interval(retention_ms))
        self._data: dict[int, dict[bytes, dict[tuple[int, int], bytes]]] = {}
        self._index = SessionEndIndex()

    def _expire(self, min_live: int) -> None:
        for segment_id in [s for s in self._data if s < min_live]:
            del self._data[segment_id]
        self._index.drop_below(min_live * self.segment_interval_ms)

    def _live_segment_ids(self) -> list[int]:
        return sorted(self._data)

    def _count_rows(self, segment_ids: list[int]) -> int:
        return sum(len(per_key) for s in segment_ids for per_key in self._data.get(s, {}).values())

    def _changelog_keys(self, segment_ids: list[int]) -> Iterator[bytes]:
        for segment_id in segment_ids:
            for key, sessions in list(self._data.get(segment_id, {}).items()):
                for end, start in list(sessions):
                    yield key + _TS2_PACK(end, start)

    def _store_session(self, segment_id: int, key: bytes, start: int, end: int, agg: bytes) -> None:
        self._data.setdefault(segment_id, {}).setdefault(key, {})[(end, start)] = agg
        self._index.add(key, start, end)

    def _drop_session(self, segment_id: int, key: bytes, start: int, end: int) -> None:
        per_key = self._data.get(segment_id, {}).get(key)
        if per_key is not None and per_key.pop((end, start), None) is not None:
            self._index.discard(key, start, end)
            if not per_key:
                del self._data[segment_id][key]

    def find_sessions(
        self, key: bytes, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[SessionKey, bytes]]:
        check_key(key)
        check_times(earliest_session_end, latest_session_start)
        self._check_open()
        actual_from = max(earliest_session_end, self._visible_from())
        result = []
        interval = self.segment_interval_ms
        for segment_id in sorted(self._data):
            if segment_id < actual_from // interval:
                continue
            per_key = self._data[segment_id].get(key)
            if not per_key:
                continue
            for end, start in sorted(per_key):
                if end >= actual_from and start <= latest_session_start:
                    result.append((SessionKey(key, start, end), per_key[(end, start)]))
        return result

    def fetch_session(self, key: bytes, session_start: int, session_end: int) -> bytes | None:
        check_key(key)
        check_times(session_start, session_end)
        self._check_open()
        if session_end < self._visible_from():
            return None
        per_key = self._data.get(session_end // self.segment_interval_ms, {}).get(key)
        return None if per_key is None else per_key.get((session_end, session_start))

    def _ending_between(self, actual_from: int, latest_session_end: int) -> list[tuple[SessionKey, bytes]]:
        interval, data = self.segment_interval_ms, self._data
        return [
            (SessionKey(key, start, end), data[end // interval][key][(end, start)])
            for end, key, start in self._index.ending_between(actual_from, latest_session_end)
        ]

    def all(self) -> list[tuple[SessionKey, bytes]]:
        self._check_open()
        visible = self._visible_from()
        result = []
        for segment_id in sorted(self._data):
            segment = self._data[segment_id]
            for key in sorted(segment):
                per_key = segment[key]
                for end, start in sorted(per_key):
                    if end >= visible:
                        result.append((SessionKey(key, start, end), per_key[(end, start)]))
        return result

    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int:
        """Replay changelog records, applying the retention cut-off markers among them where
        they stand (common/cutoff.py). Returns how many records were applied."""
        self._check_open()
        return self._restore_runs(records, self._restore_run)

    def _restore_run(self, records: Iterable[ChangelogRecord]) -> int:
        self._check_open()
        batch_records = [r for r in records if r.key is not None]
        sessions = []
        max_end = self._observed
        for record in batch_records:
            key = record.key
            assert key is not None  # filtered above
            if len(key) < 16:
                raise short_key_error(record)
            session = session_key_from_bytes(key)
            if session.start < 0 or session.end < session.start:
                raise bad_window_error(record, session.start, session.end)
            sessions.append((session, record.value))
            max_end = max(max_end, session.end)
        restored_time = self._restored_time(max_end)
        if restored_time > self._observed:
            self._advance(restored_time)
        applied = 0
        for session, value in sessions:
            segment_id = session.end // self.segment_interval_ms
            if segment_id < self._min_live:
                continue
            if value is None:
                self._drop_session(segment_id, session.key, session.start, session.end)
            else:
                self._store_session(segment_id, session.key, session.start, session.end, value)
            applied += 1
        return applied

    def stats(self) -> StoreStats:
        return self._segment_stats(None, sum(len(p) for seg in self._data.values() for p in seg.values()), 0)

    def close(self) -> None:
        self._data.clear()
        self._index.clear()
        super().close()
