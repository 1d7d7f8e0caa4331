"""The session store on RocksDB (the protocol and shared rules are in store.py).

RocksDB layout (one RocksDB per store)::

    0x00 "observed_stream_time"        -> observed stream time, 8 bytes big-endian
    0x02 | segment id (8 bytes BE) | key | end (8 bytes BE) | start (8 bytes BE) -> aggregate bytes
    0x00 "time_index", 0x03 | ...      -> the time index, when the store has one (index.py)
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from operator import attrgetter
from typing import Any, ClassVar

import numpy as np
import rocksdict

from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.serdes import serde_name
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.metadata import StoreMetadata
from airflow_stateful_provider.streams.state.common.rocks import restores_directly
from airflow_stateful_provider.streams.state.common.rocksdb_memory import RocksDBMemory
from airflow_stateful_provider.streams.state.common.segments import (
    SEGMENT_PREFIX,
    SegmentedRocksDBStore,
    segment_prefix,
)
from airflow_stateful_provider.streams.state.session.index import (
    INDEX_END,
    INDEX_PREFIX,
    TIME_INDEX_KEY,
    index_bound,
    index_row,
)
from airflow_stateful_provider.streams.state.session.key import SessionKey
from airflow_stateful_provider.streams.state.session.store import (
    MAX_TIMESTAMP,
    METADATA,
    SessionStoreBase,
    bad_window_error,
    check_key,
    check_times,
    session_retention_ms,
    session_segment_interval,
    short_key_error,
)

__all__ = ["RocksDBSessionStore"]

_MAX_TS = MAX_TIMESTAMP
_TS2 = struct.Struct(">qq")  # end, start
_record_key = attrgetter("key")
_SEGP = struct.Struct(">Bq")  # segment marker, segment id (segment_prefix in one pack)
_SEG_MARK = SEGMENT_PREFIX[0]
_INDEX_MARK = INDEX_PREFIX[0]


class RocksDBSessionStore(SegmentedRocksDBStore, SessionStoreBase):
    """Persistent session store on one RocksDB with end-time segments as key prefixes.

    ``time_index=True`` (emit-on-window-close aggregations) gives the store the time index
    of index.py, built on opening a store that has none; a store that has it keeps
    it up to date whatever this flag says, so a reader or a maintenance run never leaves
    it stale.
    """

    store_type: ClassVar[str] = METADATA.store_type

    def __init__(
        self,
        path: str | os.PathLike[str],
        retention: int | Any | None = None,
        *,
        name: str | None = None,
        key_serde: object = "bytes",
        value_serde: object = "bytes",
        inactivity_gap: int | Any | None = None,
        grace_period: int | Any | None = None,
        read_only: bool = False,
        transactional: bool = False,
        rocksdb_memory: RocksDBMemory | None = None,
        time_index: bool = False,
    ) -> None:
        retention_ms = None if retention is None else session_retention_ms(retention)
        gap_ms = None if inactivity_gap is None else duration_ms(inactivity_gap, "inactivity_gap", minimum=1)
        grace_ms = None if grace_period is None else duration_ms(grace_period, "grace_period", minimum=0)
        if retention_ms is None and gap_ms is not None:
            retention_ms = gap_ms + (grace_ms or 0)  # Kafka's default: gap + grace
        path = os.fspath(path)
        if retention_ms is None and not os.path.isdir(path):
            raise ConfigError(f"creating session store {path} needs a retention (or an inactivity gap)")
        settings = {
            "retention_ms": retention_ms,
            "segment_interval_ms": None if retention_ms is None else session_segment_interval(retention_ms),
            "inactivity_gap_ms": gap_ms,
            "grace_period_ms": grace_ms,
        }
        requested = StoreMetadata(
            store_type=self.store_type,
            name=name or os.path.basename(os.path.abspath(path)),
            key_serde=serde_name(key_serde),
            value_serde=serde_name(value_serde),
            settings={field: value for field, value in settings.items() if value is not None},
        )
        super().__init__(path, requested, read_only=read_only, transactional=transactional,
                         rocksdb_memory=rocksdb_memory)
        self._open_segments("retention_ms")
        self.retention_ms = self._segment_retention_ms
        if time_index and not self._indexed and not read_only:
            self._build_time_index()

    @property
    def time_index(self) -> bool:
        """Whether the store keeps the time index (index.py)."""
        return self._indexed

    def _load_state(self) -> None:
        super()._load_state()
        self._indexed = self._db.get(TIME_INDEX_KEY) is not None

    def _build_time_index(self) -> None:
        """Index every session (a store created before it served emit-on-window-close), a
        write batch per segment, the marker last: an interrupted build starts over."""
        for segment_id in self._segments:
            batch = rocksdict.WriteBatch(raw_mode=True)
            for (key, start, end), _ in self._scan_segment(segment_id):
                batch.put(INDEX_PREFIX + _TS2.pack(end, start) + key, b"")
            self._db.write(batch)
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.put(TIME_INDEX_KEY, b"1")
        self._db.write(batch)  # committed at once, also in a transactional store (its buffer is empty)
        self._indexed = True

    # -- writes ----------------------------------------------------------------------------

    def _store_session(self, segment_id: int, key: bytes, start: int, end: int, agg: bytes) -> None:
        if segment_id not in self._segments:
            self._segments.add(segment_id)
        window = _TS2.pack(end, start)
        if self._indexed:  # before the session row (index.py)
            self._db.put(INDEX_PREFIX + window + key, b"")
        self._db.put(_SEGP.pack(_SEG_MARK, segment_id) + key + window, agg)

    def _drop_session(self, segment_id: int, key: bytes, start: int, end: int) -> None:
        if segment_id < self._min_live or segment_id not in self._segments:
            return
        window = _TS2.pack(end, start)
        self._db.delete(_SEGP.pack(_SEG_MARK, segment_id) + key + window)
        if self._indexed:
            self._db.delete(INDEX_PREFIX + window + key)

    def _expire(self, min_live: int) -> None:
        dropped = self._segments.drop_below(min_live)
        if dropped:
            self._delete_segments(segment_prefix(dropped[0]), segment_prefix(min_live))
            if self._indexed:
                self._db.delete_range(INDEX_PREFIX, index_bound(min_live * self.segment_interval_ms))

    def _reclaim(self, dropped: list[int]) -> int:
        if dropped and self._indexed:
            self._db.compact_range(INDEX_PREFIX, index_bound((dropped[-1] + 1) * self.segment_interval_ms))
        return super()._reclaim(dropped)

    def _changelog_keys(self, segment_ids: list[int]) -> Iterator[bytes]:
        # a segment row's key after the 9-byte prefix is the changelog key: key | end | start
        for segment_id in segment_ids:
            for row_key, _ in self._segment_rows(segment_id):
                yield row_key[9:]

    # -- reads -----------------------------------------------------------------------------

    def find_sessions(
        self, key: bytes, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[SessionKey, bytes]]:
        """Sessions of ``key`` with end >= earliest_session_end and start <= latest_session_start,
        ordered by (end, start)."""
        if type(key) is not bytes:
            check_key(key)
        if type(earliest_session_end) is not int or type(latest_session_start) is not int:
            check_times(earliest_session_end, latest_session_start)
        if not self._open:
            self._check_open()
        actual_from = self._observed - self.retention_ms + 1
        if earliest_session_end > actual_from:
            actual_from = earliest_session_end
        if actual_from < 0:
            actual_from = 0
        interval = self.segment_interval_ms
        segment_ids = self._segments.from_id(actual_from // interval)
        if not segment_ids:
            return []
        if actual_from > _MAX_TS or latest_session_start < 0:
            return []
        lo_suffix = _TS2.pack(actual_from, 0)
        hi_suffix = _TS2.pack(_MAX_TS, min(latest_session_start, _MAX_TS))
        want_len = 9 + len(key) + 16
        result: list[tuple[SessionKey, bytes]] = []
        pack = _SEGP.pack
        unpack_from = _TS2.unpack_from
        for segment_id in segment_ids:
            prefix = pack(_SEG_MARK, segment_id) + key
            hi = prefix + hi_suffix
            # bounded at the key's last possible row: once the sessions of a segment have grown
            # into the next, the rest of the segment is deleted rows (a read 160x slower at
            # 10,000 keys)
            it, _bound = self._iter_below(hi + b"\x00")
            it.seek(prefix + lo_suffix)
            while it.valid():
                row_key = it.key()
                if row_key > hi:
                    break
                if len(row_key) == want_len:
                    end, start = unpack_from(row_key, want_len - 16)
                    if start <= latest_session_start:
                        result.append((SessionKey(key, start, end), it.value()))
                it.next()
        return result

    def fetch_session(self, key: bytes, session_start: int, session_end: int) -> bytes | None:
        """The aggregate of exactly that session, or None (also when expired)."""
        if type(key) is not bytes:
            check_key(key)
        check_times(session_start, session_end)
        self._check_open()
        if session_end < self._observed - self.retention_ms + 1 or session_end < 0 or session_start < 0:
            return None
        segment_id = session_end // self.segment_interval_ms
        if segment_id not in self._segments:
            return None
        row_key = _SEGP.pack(_SEG_MARK, segment_id) + key + _TS2.pack(session_end, session_start)
        value: bytes | None = self._db.get(row_key)
        return value

    def _ending_between(self, actual_from: int, latest_session_end: int) -> list[tuple[SessionKey, bytes]]:
        if not self._indexed:
            return self._scan_ending_between(actual_from, latest_session_end)
        interval = self.segment_interval_ms
        result = []
        # bounded: the index rows of the sessions still growing (each growth deletes one) lie
        # just past the sessions asked for
        upper = index_bound(latest_session_end + 1) if latest_session_end < _MAX_TS else INDEX_END
        it, _bound = self._iter_below(upper)
        it.seek(index_bound(actual_from))
        get, pack, unpack_from = self._db.get, _SEGP.pack, _TS2.unpack_from
        while it.valid():
            row_key = it.key()
            if row_key[0] != _INDEX_MARK:
                break
            end, start = unpack_from(row_key, 1)
            if end > latest_session_end:
                break
            key = row_key[17:]
            agg = get(pack(_SEG_MARK, end // interval) + key + row_key[1:17])
            if agg is not None:  # else the session was deleted and its index row not yet
                result.append((SessionKey(key, start, end), agg))
            it.next()
        return result

    def _scan_ending_between(self, actual_from: int, latest_session_end: int) -> list[tuple[SessionKey, bytes]]:
        interval = self.segment_interval_ms
        result = []
        for segment_id in self._segments.from_id(actual_from // interval):
            if segment_id > latest_session_end // interval:
                break
            for session, agg in self._scan_segment(segment_id):
                if actual_from <= session.end <= latest_session_end:
                    result.append((session, agg))
        return result

    def all(self) -> list[tuple[SessionKey, bytes]]:
        """Every unexpired session, by segment then key, end, start."""
        self._check_open()
        visible = self._visible_from()
        result = []
        for segment_id in self._segments.from_id(max(visible, 0) // self.segment_interval_ms):
            for session, agg in self._scan_segment(segment_id):
                if session.end >= visible:
                    result.append((session, agg))
        return result

    def _scan_segment(self, segment_id: int) -> Iterable[tuple[SessionKey, bytes]]:
        for row_key, value in self._segment_rows(segment_id):
            end, start = _TS2.unpack_from(row_key, len(row_key) - 16)
            yield SessionKey(row_key[9:-16], start, end), value

    def _segment_rows(self, segment_id: int) -> Iterator[tuple[bytes, bytes]]:
        """The rows of one segment, by key: ``mark | segment id | key | end | start``."""
        prefix = _SEGP.pack(_SEG_MARK, segment_id)
        it, _bound = self._iter_below(segment_prefix(segment_id + 1))
        it.seek(prefix)
        while it.valid():
            row_key = it.key()
            if not row_key.startswith(prefix):
                break
            yield row_key, it.value()
            it.next()

    # -- restore ---------------------------------------------------------------------------

    @restores_directly
    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int:
        """Replay changelog records, applying the retention cut-off markers among them where
        they stand (common/cutoff.py). Returns how many records were applied."""
        self._check_writable()
        return self._restore_runs(records, self._restore_run)

    def _restore_run(self, records: Iterable[ChangelogRecord]) -> int:
        """Apply changelog records (key = key + end + start) in one RocksDB write batch.

        Like Kafka, observed stream time first advances to the batch's largest end (at most
        to the stream time processing resumes from, module docstring), then records for dead
        segments are skipped. Null keys are skipped. Returns how many records were applied.

        The session windows are read for the whole batch at once (numpy): replaying a long
        changelog, most records land in segments that are dead by the batch's end, and only
        the live ones reach the Python loop that fills the write batch.
        """
        self._check_writable()
        records = records if isinstance(records, list) else list(records)
        keys = list(map(_record_key, records))
        if None in keys:
            records = [record for record, key in zip(records, keys, strict=True) if key is not None]
            keys = list(map(_record_key, records))
        if not keys:
            return 0
        ends = _session_ends(keys, records)
        restored_time = self._restored_time(int(ends.max()))
        if restored_time > self._observed:
            self._advance(restored_time)
        segment_ids = ends // self.segment_interval_ms
        live_at = np.flatnonzero(segment_ids >= self._min_live)
        live, live_segment_ids = live_at.tolist(), segment_ids[live_at].tolist()
        if not live:
            return 0
        prefixes = {segment_id: _SEGP.pack(_SEG_MARK, segment_id) for segment_id in set(live_segment_ids)}
        row_keys = [prefixes[segment_id] + keys[i] for i, segment_id in zip(live, live_segment_ids, strict=True)]
        values = [records[i].value for i in live]
        batch = rocksdict.WriteBatch(raw_mode=True)
        for row_key, value in zip(row_keys, values, strict=True):
            if value is None:
                batch.delete(row_key)
            else:
                batch.put(row_key, value)
        if self._indexed:  # the index rows, derived from the changelog keys (index.py)
            for i, value in zip(live, values, strict=True):
                if value is None:
                    batch.delete(index_row(keys[i]))
                else:
                    batch.put(index_row(keys[i]), b"")
        for segment_id in {segment_id for segment_id, value in zip(live_segment_ids, values, strict=True)
                           if value is not None}:
            self._segments.add(segment_id)  # the segments that got a row
        self._db.write(batch)
        return len(row_keys)


#: Positions of the end and start fields (16 bytes) from the start of a key's window suffix.
_WINDOW_BYTES = np.arange(16)


def _session_ends(keys: list[bytes], records: list[Any]) -> np.ndarray:
    """The session end of each changelog key (key bytes + end + start, big-endian), checked:
    a key shorter than the window, or a window with start < 0 or end < start, is refused
    naming its record's offset."""
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    short = np.flatnonzero(lengths < 16)
    if len(short):
        raise short_key_error(records[short[0]])
    blob = np.frombuffer(b"".join(keys), dtype=np.uint8)
    suffix_at = np.cumsum(lengths) - 16
    windows: np.ndarray = blob[suffix_at[:, None] + _WINDOW_BYTES].view(">i8").astype(np.int64)  # rows: end, start
    ends, starts = windows[:, 0], windows[:, 1]
    bad = np.flatnonzero((starts < 0) | (ends < starts))
    if len(bad):
        raise bad_window_error(records[bad[0]], int(starts[bad[0]]), int(ends[bad[0]]))
    return ends
