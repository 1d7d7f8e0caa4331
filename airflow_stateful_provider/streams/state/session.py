"""Session stores (KIP-94): aggregates per (key, session window), RocksDB and in-memory.

Store key layout (also the changelog key), SEMANTICS §4::

    record key bytes | end (8 bytes big-endian) | start (8 bytes big-endian)

Sessions live in segments by end time: ``interval = max(retention / 2, 60000)``,
``segment id = end // interval``. A segment is live while
``id >= (observed stream time - retention) // interval``; dead segments are dropped
whole and writes into them are discarded. Reads additionally hide sessions with
``end < observed - retention + 1`` (Kafka's ``actualFrom``), so what a query
returns never depends on segment boundaries.

RocksDB layout (one RocksDB per store)::

    0x00 "observed_stream_time"        -> observed stream time, 8 bytes big-endian
    0x02 | segment id (8 bytes BE) | session key layout above -> aggregate bytes

Observed stream time advances on every put and remove (with the session end) and
is persisted on flush, so expiry continues correctly after a restart.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import rocksdict

from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import ConfigError, InvalidRecordError
from airflow_stateful_provider.streams.serdes import serde_name
from airflow_stateful_provider.streams.state.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.maintenance import StoreStats
from airflow_stateful_provider.streams.state.memory import InMemoryStore
from airflow_stateful_provider.streams.state.metadata import StoreMetadata, StoreType
from airflow_stateful_provider.streams.state.rocks import restores_directly
from airflow_stateful_provider.streams.state.segments import (
    SEGMENT_PREFIX,
    SegmentedRocksDBStore,
    SegmentedStore,
    session_segment_interval,
)
from airflow_stateful_provider.streams.state.session_key import (
    SessionKey,
    as_session_key,
    session_key_from_bytes,
)


__all__ = [
    "InMemorySessionStore",
    "RocksDBSessionStore",
    "SessionStore",
]

_MAX_TS = (1 << 63) - 1
_TS2 = struct.Struct(">qq")  # end, start
_record_key = attrgetter("key")
_SEGP = struct.Struct(">Bq")  # segment marker, segment id (segment_prefix in one pack)
_SEG_MARK = SEGMENT_PREFIX[0]


def _check_agg(agg: object) -> None:
    if type(agg) is not bytes:
        raise InvalidRecordError(f"session aggregates must be bytes or None, got {type(agg).__name__} {agg!r:.80}")


def _check_key(key: object) -> None:
    if type(key) is not bytes:
        if key is None:
            raise InvalidRecordError("session key cannot be null (None)")
        raise InvalidRecordError(f"session store keys must be bytes, got {type(key).__name__} {key!r:.80}")


def _check_times(*times: object) -> None:
    """Query bounds must be ints (a float or None would silently mis-sort as bytes)."""
    for value in times:
        if type(value) is not int:
            raise InvalidRecordError(f"session time bounds must be int ms, got {type(value).__name__} {value!r}")


def _retention(retention: int | Any) -> int:
    ms = duration_ms(retention, "session store retention")
    if ms <= 0:
        raise ConfigError(f"session store retention must be > 0 ms, got {ms} ms")
    return ms


@runtime_checkable
class SessionStore(Protocol):
    """Kafka Streams' ``SessionStore<Bytes, byte[]>`` in snake_case.

    Results are lists of ``(SessionKey, aggregate)`` ordered by (end, start) for one key.
    """

    name: str
    persistent: bool

    def find_sessions(
        self, key: bytes, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[SessionKey, bytes]]: ...

    def backward_find_sessions(
        self, key: bytes, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[SessionKey, bytes]]: ...

    def find_sessions_by_end(
        self, earliest_session_end: int, latest_session_end: int
    ) -> list[tuple[SessionKey, bytes]]: ...

    def fetch(self, key: bytes) -> list[tuple[SessionKey, bytes]]: ...

    def fetch_session(self, key: bytes, session_start: int, session_end: int) -> bytes | None: ...

    def put(self, windowed: SessionKey, agg: bytes | None) -> None: ...

    def remove(self, windowed: SessionKey) -> None: ...

    def all(self) -> list[tuple[SessionKey, bytes]]: ...

    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class _SessionBase(SegmentedStore):
    """The read visibility rule, the queries derived from ``find_sessions`` and the
    contract of ``find_sessions_by_end``, the same in both implementations (observed
    stream time is the largest session end seen by put/remove)."""

    retention_ms: int
    read_only: bool
    _open: bool
    _check_open: Callable[[], None]
    #: the storage steps of put and remove, once the write is admitted
    _store_session: Callable[[int, bytes, int, int, bytes], None]
    _drop_session: Callable[[int, bytes, int, int], None]
    find_sessions: Callable[[bytes, int, int], list[tuple[SessionKey, bytes]]]
    #: sessions of all keys with ``actual_from <= end <= latest_session_end``, any order
    _ending_between: Callable[[int, int], list[tuple[SessionKey, bytes]]]

    def _visible_from(self) -> int:
        """Smallest session end a read may return (Kafka's actualFrom)."""
        return self._observed - self.retention_ms + 1

    def put(self, windowed: SessionKey, agg: bytes | None) -> None:
        """Store ``agg`` for the session; None removes it. Writes into dead segments are dropped."""
        key, start, end = windowed = as_session_key(windowed)
        if agg is None:
            self.remove(windowed)
            return
        if type(agg) is not bytes:
            _check_agg(agg)
        if self.read_only or not self._open:
            self._check_writable()
        if end > self._observed:
            self._advance(end)
        segment_id = end // self.segment_interval_ms
        if segment_id < self._min_live:
            self.dropped_writes += 1
            return
        self._store_session(segment_id, key, start, end, agg)

    def remove(self, windowed: SessionKey) -> None:
        """Delete the session (no-op when absent or already expired)."""
        key, start, end = windowed = as_session_key(windowed)
        if self.read_only or not self._open:
            self._check_writable()
        if end > self._observed:
            self._advance(end)
        self._drop_session(end // self.segment_interval_ms, key, start, end)

    def backward_find_sessions(
        self, key: bytes, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[SessionKey, bytes]]:
        """:meth:`find_sessions` in reverse order."""
        result = self.find_sessions(key, earliest_session_end, latest_session_start)
        result.reverse()
        return result

    def fetch(self, key: bytes) -> list[tuple[SessionKey, bytes]]:
        """All (unexpired) sessions of ``key``."""
        return self.find_sessions(key, 0, _MAX_TS)

    def backward_fetch(self, key: bytes) -> list[tuple[SessionKey, bytes]]:
        return self.backward_find_sessions(key, 0, _MAX_TS)

    def find_sessions_by_end(
        self, earliest_session_end: int, latest_session_end: int
    ) -> list[tuple[SessionKey, bytes]]:
        """Sessions of all keys with end in [earliest, latest], ordered by (end, key, start).

        Used by emit-on-window-close, which asks for sessions that just closed: like Kafka's
        time-ordered session store it returns every session still in a live segment,
        without the ``observed - retention + 1`` read cut-off of the other queries (a
        session ending at ``close - 1`` is already past that cut-off). Scans the whole
        segments covering the range, so call it per close-time advance, not per record.
        """
        _check_times(earliest_session_end, latest_session_end)
        self._check_open()
        actual_from = max(earliest_session_end, 0)
        if latest_session_end < actual_from:
            return []
        result = self._ending_between(actual_from, latest_session_end)
        result.sort(key=lambda item: (item[0].end, item[0].key, item[0].start))
        return result


class RocksDBSessionStore(SegmentedRocksDBStore, _SessionBase):
    """Persistent session store on one RocksDB with end-time segments as key prefixes."""

    store_type: ClassVar[StoreType] = StoreType.SESSION

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
    ) -> None:
        retention_ms = None if retention is None else _retention(retention)
        gap_ms = None if inactivity_gap is None else duration_ms(inactivity_gap, "inactivity_gap", minimum=1)
        grace_ms = None if grace_period is None else duration_ms(grace_period, "grace_period", minimum=0)
        if retention_ms is None and gap_ms is not None:
            retention_ms = gap_ms + (grace_ms or 0)  # Kafka's default: gap + grace
        path = os.fspath(path)
        if retention_ms is None and not os.path.isdir(path):
            raise ConfigError(f"creating session store {path} needs a retention (or an inactivity gap)")
        requested = StoreMetadata(
            store_type=StoreType.SESSION,
            name=name or os.path.basename(os.path.abspath(path)),
            key_serde=serde_name(key_serde),
            value_serde=serde_name(value_serde),
            retention_ms=retention_ms,
            segment_interval_ms=None if retention_ms is None else session_segment_interval(retention_ms),
            inactivity_gap_ms=gap_ms,
            grace_period_ms=grace_ms,
        )
        super().__init__(path, requested, read_only=read_only, transactional=transactional)
        self._open_segments(self.metadata.retention_ms)
        self.retention_ms = self._segment_retention_ms

    # -- writes ----------------------------------------------------------------------------

    def _store_session(self, segment_id: int, key: bytes, start: int, end: int, agg: bytes) -> None:
        if segment_id not in self._segments:
            self._segments.add(segment_id)
        self._db.put(_SEGP.pack(_SEG_MARK, segment_id) + key + _TS2.pack(end, start), agg)

    def _drop_session(self, segment_id: int, key: bytes, start: int, end: int) -> None:
        if segment_id < self._min_live or segment_id not in self._segments:
            return
        self._db.delete(_SEGP.pack(_SEG_MARK, segment_id) + key + _TS2.pack(end, start))

    # -- reads -----------------------------------------------------------------------------

    def find_sessions(
        self, key: bytes, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[SessionKey, bytes]]:
        """Sessions of ``key`` with end >= earliest_session_end and start <= latest_session_start,
        ordered by (end, start)."""
        if type(key) is not bytes:
            _check_key(key)
        if type(earliest_session_end) is not int or type(latest_session_start) is not int:
            _check_times(earliest_session_end, latest_session_start)
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
        it = self._db.iter()
        pack = _SEGP.pack
        unpack_from = _TS2.unpack_from
        for segment_id in segment_ids:
            prefix = pack(_SEG_MARK, segment_id) + key
            hi = prefix + hi_suffix
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
            _check_key(key)
        _check_times(session_start, session_end)
        self._check_open()
        if session_end < self._observed - self.retention_ms + 1 or session_end < 0 or session_start < 0:
            return None
        segment_id = session_end // self.segment_interval_ms
        if segment_id not in self._segments:
            return None
        return self._db.get(_SEGP.pack(_SEG_MARK, segment_id) + key + _TS2.pack(session_end, session_start))

    def _ending_between(self, actual_from: int, latest_session_end: int) -> list[tuple[SessionKey, bytes]]:
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
        it = self._db.iter()
        prefix = _SEGP.pack(_SEG_MARK, segment_id)
        it.seek(prefix)
        while it.valid():
            row_key = it.key()
            if not row_key.startswith(prefix):
                break
            end, start = _TS2.unpack_from(row_key, len(row_key) - 16)
            yield SessionKey(row_key[9:-16], start, end), it.value()
            it.next()

    # -- restore ---------------------------------------------------------------------------

    @restores_directly
    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int:
        """Apply changelog records (key = key + end + start) in one RocksDB write batch.

        Like Kafka, observed stream time first advances to the batch's largest end, then
        records for dead segments are skipped. Null keys are skipped. Returns how many
        records were applied.

        The session windows are read for the whole batch at once (numpy): replaying a long
        changelog, most records land in segments that are dead by the batch's end, and only
        the live ones reach the Python loop that fills the write batch.
        """
        self._check_writable()
        records = records if isinstance(records, list) else list(records)
        keys = list(map(_record_key, records))
        if None in keys:
            records = [record for record, key in zip(records, keys) if key is not None]
            keys = list(map(_record_key, records))
        if not keys:
            return 0
        ends = _session_ends(keys, records)
        max_end = int(ends.max())
        if max_end > self._observed:
            self._advance(max_end)
        segment_ids = ends // self.segment_interval_ms
        live_at = np.flatnonzero(segment_ids >= self._min_live)
        live, live_segment_ids = live_at.tolist(), segment_ids[live_at].tolist()
        if not live:
            return 0
        prefixes = {segment_id: _SEGP.pack(_SEG_MARK, segment_id) for segment_id in set(live_segment_ids)}
        row_keys = [prefixes[segment_id] + keys[i] for i, segment_id in zip(live, live_segment_ids)]
        values = [records[i].value for i in live]
        batch = rocksdict.WriteBatch(raw_mode=True)
        for row_key, value in zip(row_keys, values):
            if value is None:
                batch.delete(row_key)
            else:
                batch.put(row_key, value)
        for segment_id in {segment_id for segment_id, value in zip(live_segment_ids, values) if value is not None}:
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
        raise _short_key(records[short[0]])
    blob = np.frombuffer(b"".join(keys), dtype=np.uint8)
    suffix_at = np.cumsum(lengths) - 16
    windows = blob[suffix_at[:, None] + _WINDOW_BYTES].view(">i8").astype(np.int64)  # rows: end, start
    ends, starts = windows[:, 0], windows[:, 1]
    bad = np.flatnonzero((starts < 0) | (ends < starts))
    if len(bad):
        raise _bad_window(records[bad[0]], int(starts[bad[0]]), int(ends[bad[0]]))
    return ends


def _short_key(record: Any) -> InvalidRecordError:
    return InvalidRecordError(
        f"session changelog record at offset {record.offset} has a {len(record.key)}-byte key; "
        f"expected key + end + start (>= 16 bytes): {record.key!r:.80}"
    )


def _bad_window(record: Any, start: int, end: int) -> InvalidRecordError:
    """Reads trust the stored bounds: a restore refuses them here."""
    return InvalidRecordError(
        f"session changelog record at offset {record.offset} has session window "
        f"[{start}, {end}]; expected 0 <= start <= end: {record.key!r:.80}"
    )


class InMemorySessionStore(InMemoryStore, _SessionBase):
    """Non-persistent session store with the same segments and visibility as the RocksDB one.

    Layout: ``{segment id: {key: {(end, start): aggregate}}}``.
    """

    store_type: ClassVar[StoreType] = StoreType.SESSION

    def __init__(
        self,
        retention: int | Any,
        name: str = "in-memory-session",
        *,
        key_serde: object = "bytes",
        value_serde: object = "bytes",
    ) -> None:
        retention_ms = _retention(retention)
        super().__init__(name, key_serde=key_serde, value_serde=value_serde)
        self.retention_ms = retention_ms
        self._init_segments(retention_ms, session_segment_interval(retention_ms))
        self._data: dict[int, dict[bytes, dict[tuple[int, int], bytes]]] = {}

    def _expire(self, min_live: int) -> None:
        for segment_id in [s for s in self._data if s < min_live]:
            del self._data[segment_id]

    def _live_segment_ids(self) -> list[int]:
        return sorted(self._data)

    def _store_session(self, segment_id: int, key: bytes, start: int, end: int, agg: bytes) -> None:
        self._data.setdefault(segment_id, {}).setdefault(key, {})[(end, start)] = agg

    def _drop_session(self, segment_id: int, key: bytes, start: int, end: int) -> None:
        per_key = self._data.get(segment_id, {}).get(key)
        if per_key is not None:
            per_key.pop((end, start), None)
            if not per_key:
                del self._data[segment_id][key]

    def find_sessions(
        self, key: bytes, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[SessionKey, bytes]]:
        _check_key(key)
        _check_times(earliest_session_end, latest_session_start)
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
        _check_key(key)
        _check_times(session_start, session_end)
        self._check_open()
        if session_end < self._visible_from():
            return None
        per_key = self._data.get(session_end // self.segment_interval_ms, {}).get(key)
        return None if per_key is None else per_key.get((session_end, session_start))

    def _ending_between(self, actual_from: int, latest_session_end: int) -> list[tuple[SessionKey, bytes]]:
        return [
            (SessionKey(key, start, end), agg)
            for segment in self._data.values()
            for key, per_key in segment.items()
            for (end, start), agg in per_key.items()
            if actual_from <= end <= latest_session_end
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
        self._check_open()
        batch_records = [r for r in records if r.key is not None]
        sessions = []
        max_end = self._observed
        for record in batch_records:
            if len(record.key) < 16:
                raise _short_key(record)
            session = session_key_from_bytes(record.key)
            if session.start < 0 or session.end < session.start:
                raise _bad_window(record, session.start, session.end)
            sessions.append((session, record.value))
            max_end = max(max_end, session.end)
        if max_end > self._observed:
            self._advance(max_end)
        applied = 0
        for session, value in sessions:
            if session.end // self.segment_interval_ms < self._min_live:
                continue
            if value is None:
                self.remove(session)
            else:
                self.put(session, value)
            applied += 1
        return applied

    def stats(self) -> StoreStats:
        return self._segment_stats(None, sum(len(p) for seg in self._data.values() for p in seg.values()), 0)

    def close(self) -> None:
        self._data.clear()
        super().close()
