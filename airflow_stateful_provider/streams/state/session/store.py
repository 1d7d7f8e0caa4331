"""Session stores (KIP-94): aggregates per (key, session window). This module holds the
protocol and what both implementations share; the RocksDB one is in rocksdb.py, the
in-memory one in in_memory.py, the time index both keep for emit-on-window-close in index.py.

Store key layout (also the changelog key), docs/semantics.md §4::

    record key bytes | end (8 bytes big-endian) | start (8 bytes big-endian)

Sessions live in segments by end time: ``interval = max(retention / 2, 60000)``,
``segment id = end // interval``. A segment is live while
``id >= (observed stream time - retention) // interval``; dead segments are dropped
whole and writes into them are discarded. Reads additionally hide sessions with
``end < observed - retention + 1`` (Kafka's ``actualFrom``), so what a query
returns never depends on segment boundaries.

Observed stream time advances on every put and remove (with the session end) and
is persisted on flush, so expiry continues correctly after a restart. Restoring moves it
to the restored sessions' largest end, but never past the stream time the task resumes
processing from (:meth:`SessionStoreBase.resume_from_commit`): after an at-least-once
crash the changelog holds writes of records the task processes again, and a clock moved
by them would hide (and drop the segments of) the sessions those records belong to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import ConfigError, InvalidRecordError
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.cutoff import SESSION_CUTOFF_KEY
from airflow_stateful_provider.streams.state.common.metadata import MetadataKind
from airflow_stateful_provider.streams.state.common.segments import SegmentedStore
from airflow_stateful_provider.streams.state.session.key import SessionKey, as_session_key

__all__ = [
    "MAX_TIMESTAMP",
    "METADATA",
    "SessionStore",
    "SessionStoreBase",
    "bad_window_error",
    "check_key",
    "check_times",
    "session_retention_ms",
    "session_segment_interval",
    "short_key_error",
]

MAX_TIMESTAMP = (1 << 63) - 1
#: What the metadata of a session store directory holds: the retention and segment interval
#: it was created with, and the session windows' gap and grace when it was built from them.
METADATA = MetadataKind(
    "session",
    required={"retention_ms": 1, "segment_interval_ms": 1},
    optional={"inactivity_gap_ms": 0, "grace_period_ms": 0},
)


def session_segment_interval(retention_ms: int) -> int:
    """Kafka's session store segment interval: ``max(retention / 2, 60000)``."""
    return max(retention_ms // 2, 60_000)


def _check_agg(agg: object) -> None:
    if type(agg) is not bytes:
        raise InvalidRecordError(f"session aggregates must be bytes or None, got {type(agg).__name__} {agg!r:.80}")


def check_key(key: object) -> None:
    if type(key) is not bytes:
        if key is None:
            raise InvalidRecordError("session key cannot be null (None)")
        raise InvalidRecordError(f"session store keys must be bytes, got {type(key).__name__} {key!r:.80}")


def check_times(*times: object) -> None:
    """Query bounds must be ints (a float or None would silently mis-sort as bytes)."""
    for value in times:
        if type(value) is not int:
            raise InvalidRecordError(f"session time bounds must be int ms, got {type(value).__name__} {value!r}")


def session_retention_ms(retention: int | Any) -> int:
    ms = duration_ms(retention, "session store retention")
    if ms <= 0:
        raise ConfigError(f"session store retention must be > 0 ms, got {ms} ms")
    return ms


@runtime_checkable
class SessionStore(Protocol):
    """Kafka Streams' ``SessionStore<Bytes, byte[]>`` in snake_case.

    Results are lists of ``(SessionKey, aggregate)`` ordered by (end, start) for one key.
    """

    @property
    def name(self) -> str: ...


    @property
    def persistent(self) -> bool: ...

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


class SessionStoreBase(SegmentedStore):
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

    #: what restoring may move observed stream time to at most (resume_from_commit)
    _restore_limit: int | None = None
    cutoff_marker_key = SESSION_CUTOFF_KEY

    def resume_from_commit(self, stream_time: int) -> None:
        """The task resumes processing from its last commit, whose stream time was
        ``stream_time``: observed stream time goes back to it if it is ahead (the store's
        files held writes of later records) and restoring no longer moves it past it, so the
        records processed again find their sessions as they did the first time. The sessions
        restored from later writes stay, ahead of the clock, as they were."""
        stream_time = max(stream_time, self._cutoff)  # never back before a retention cut-off
        self._restore_limit = stream_time
        if self._observed > stream_time:
            self._set_observed(stream_time)

    def _restored_time(self, max_end: int) -> int:
        """Observed stream time after restoring sessions ending at ``max_end`` at most."""
        limit = self._restore_limit
        return max_end if limit is None or max_end < limit else limit

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
        return self.find_sessions(key, 0, MAX_TIMESTAMP)

    def backward_fetch(self, key: bytes) -> list[tuple[SessionKey, bytes]]:
        return self.backward_find_sessions(key, 0, MAX_TIMESTAMP)

    def find_sessions_by_end(
        self, earliest_session_end: int, latest_session_end: int
    ) -> list[tuple[SessionKey, bytes]]:
        """Sessions of all keys with end in [earliest, latest], ordered by (end, key, start).

        Used by emit-on-window-close, which asks for sessions that just closed: like Kafka's
        time-ordered session store it returns every session still in a live segment,
        without the ``observed - retention + 1`` read cut-off of the other queries (a
        session ending at ``close - 1`` is already past that cut-off). With the time index
        (index.py) it costs a seek plus the sessions returned; a RocksDB store
        without it scans the segments covering the range.
        """
        check_times(earliest_session_end, latest_session_end)
        self._check_open()
        actual_from = max(earliest_session_end, 0)
        if latest_session_end < actual_from:
            return []
        result = self._ending_between(actual_from, latest_session_end)
        result.sort(key=lambda item: (item[0].end, item[0].key, item[0].start))
        return result


def short_key_error(record: Any) -> InvalidRecordError:
    return InvalidRecordError(
        f"session changelog record at offset {record.offset} has a {len(record.key)}-byte key; "
        f"expected key + end + start (>= 16 bytes): {record.key!r:.80}"
    )


def bad_window_error(record: Any, start: int, end: int) -> InvalidRecordError:
    """Reads trust the stored bounds: a restore refuses them here."""
    return InvalidRecordError(
        f"session changelog record at offset {record.offset} has session window "
        f"[{start}, {end}]; expected 0 <= start <= end: {record.key!r:.80}"
    )
