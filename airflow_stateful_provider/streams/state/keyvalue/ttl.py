"""Time to live for key-value stores (``Materialized.with_time_to_live``).

A key not updated for the TTL is deleted, as Flink's state TTL and Spark's
``transformWithState`` TTL do, measured in *stream time* (event time) rather than processing
time so that a replay gives the same answer (docs/maintenance.md, "Key-value TTL"):

- each write stamps the key with the timestamp of the record being processed (the value is
  stored as ``timestamp (8 bytes big-endian) | value bytes``, in the store and its changelog);
- the store's stream time is the largest stamp written, or the ``now`` of the last
  maintenance run if later (the cut-off); a key whose ``stamp + ttl <= stream time`` is
  expired: reads never return it, and it is deleted as soon as stream time passes it
  (a changelog tombstone, and the expiry listener: a KTable forwards a delete downstream);
- ``enforce_retention(now_ms)`` (the maintenance operators) moves stream time to ``now_ms``
  (stalled partitions: the wall clock of the run), deletes what expired and writes the
  cut-off marker (state/common/cutoff.py) under a reserved key, so a restored store has the
  same clock; stream time is the newest stamp a row holds, and a clock row
  (:data:`TTL_CLOCK_KEY`) is written only when the row holding it is deleted or rewritten
  with an older stamp, so a restore rebuilds the same clock;
- a write whose timestamp is already expired deletes the key (what it wrote would be
  expired at once); the DSL processors drop such records as ``expired`` first.

The layer sits above the changelogging store: every delete it makes is logged. Only writes
delete (a record's arrival, a write, a maintenance run: the active task); reads, also a
standby's, never do, so a standby or a restoring task writes no tombstone. Its clock and the
expiry queue live in memory and are rebuilt by one scan of the store the first time it is
used (after restoration). Unlike the segmented stores, nothing is dropped in bulk: expiry costs
one delete per key.
"""

from __future__ import annotations

import dataclasses
import heapq
import struct
from collections.abc import Callable, Iterator
from typing import Any

from airflow_stateful_provider.streams.errors import InvalidRecordError
from airflow_stateful_provider.streams.state.common.cutoff import VERSIONED_CUTOFF_KEY, decode_cutoff, encode_cutoff
from airflow_stateful_provider.streams.state.common.maintenance import RetentionResult

__all__ = ["TTL_CLOCK_KEY", "TTL_CUTOFF_KEY", "TimeToLiveKeyValueStore", "key_stamp"]

#: Where a TTL store keeps its cut-off marker (a row of the store, so also a changelog record).
TTL_CUTOFF_KEY = VERSIONED_CUTOFF_KEY
#: Where it keeps its stream time when the row that carried it goes (deleted, or rewritten
#: with an older stamp): 8 bytes big-endian. Stream time is otherwise the newest stamp.
TTL_CLOCK_KEY = b"\x00stateful-provider:ttl-clock"
_RESERVED = (TTL_CUTOFF_KEY, TTL_CLOCK_KEY)
_TS = struct.Struct(">q")
_NONE = -1

#: listener(key bytes, last value bytes, the stream time it expired at)
ExpiryListener = Callable[[bytes, bytes, int], None]


@dataclasses.dataclass
class _Record:
    key: bytes
    value: bytes
    offset: int = -1


def key_stamp(raw: bytes) -> int:
    """The stamp (last update's timestamp) of a stored row."""
    stamp: int = _TS.unpack_from(raw)[0]
    return stamp


class TimeToLiveKeyValueStore:
    """A key-value byte store whose keys expire ``time_to_live_ms`` of stream time after their
    last write (module docstring). ``record_timestamp``: the timestamp of the record being
    processed (the task's context)."""

    def __init__(self, inner: Any, time_to_live_ms: int, record_timestamp: Callable[[], int]) -> None:
        if type(time_to_live_ms) is not int or time_to_live_ms < 1:
            raise InvalidRecordError(f"time_to_live must be >= 1 ms, got {time_to_live_ms!r}")
        self.inner = inner
        self.time_to_live_ms = time_to_live_ms
        self._timestamp = record_timestamp
        self._built = False
        self._observed = _NONE
        self._cutoff = _NONE
        self._queue: list[tuple[int, bytes]] = []  # (stamp, key); stale entries skipped
        self._listener: ExpiryListener | None = None
        #: keys deleted because they expired, since the store was opened
        self.expired_keys = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # flush, close, stats, compact, restore_batch, ...

    @property
    def name(self) -> str:
        name: str = self.inner.name
        return name

    @property
    def persistent(self) -> bool:
        return bool(self.inner.persistent)

    # -- clock -----------------------------------------------------------------------------

    @property
    def observed_stream_time(self) -> int:
        self._ensure_built()
        return self._observed

    @property
    def retention_cutoff(self) -> int | None:
        self._ensure_built()
        return None if self._cutoff == _NONE else self._cutoff

    def expired(self, timestamp: int) -> bool:
        """Whether a key stamped ``timestamp`` is expired at the current stream time."""
        self._ensure_built()
        return timestamp + self.time_to_live_ms <= self._observed

    def observe(self, timestamp: int) -> None:
        """A record at ``timestamp`` arrives: the keys expired by then are deleted before it
        reads or writes the store, so its reads never see them. Stream time itself moves only
        with what the store holds (a write's stamp, a cut-off): a restore rebuilds it."""
        self._ensure_built()
        self._sweep(max(timestamp, self._observed))

    def set_expiry_listener(self, listener: ExpiryListener | None) -> bool:
        self._listener = listener
        return True

    def invalidate(self) -> None:
        """Rows arrived underneath (a restore batch): rebuild the clock and the queue at the
        next use (a standby answering a query, then promoted, never works from a stale one)."""
        self._built = False
        self._cutoff = _NONE

    def _ensure_built(self) -> None:
        if self._built:
            return
        self._built = True
        queue = []
        observed = _NONE
        for key, raw in self.inner.all():
            if key == TTL_CUTOFF_KEY:
                self._cutoff = decode_cutoff(_Record(key, raw))
                continue
            if key == TTL_CLOCK_KEY:
                observed = max(observed, _TS.unpack_from(raw)[0])
                continue
            stamp = _TS.unpack_from(raw)[0]
            queue.append((stamp, key))
            if stamp > observed:
                observed = stamp
        heapq.heapify(queue)
        self._queue = queue
        self._observed = max(observed, self._cutoff)
        # no sweep here: building is a read (a standby answering a query, a restored task before
        # its first record), and only the active task's writes delete; reads skip expired rows

    def _advance(self, timestamp: int) -> None:
        if timestamp > self._observed:
            self._observed = timestamp
            self._sweep()

    def _sweep(self, now: int | None = None) -> int:
        """Delete every key whose stamp + ttl <= ``now`` (default: stream time), oldest first."""
        horizon = (self._observed if now is None else now) - self.time_to_live_ms
        queue, inner = self._queue, self.inner
        deleted = 0
        while queue and queue[0][0] <= horizon:
            stamp, key = heapq.heappop(queue)
            raw = inner.get(key)
            if raw is None or _TS.unpack_from(raw)[0] != stamp:
                continue  # rewritten or deleted since: a stale queue entry
            inner.delete(key)
            deleted += 1
            self.expired_keys += 1
            if self._listener is not None:
                self._listener(key, raw[8:], stamp + self.time_to_live_ms)
        return deleted

    # -- reads -----------------------------------------------------------------------------

    def _live(self, raw: bytes | None) -> bytes | None:
        if raw is None or _TS.unpack_from(raw)[0] + self.time_to_live_ms <= self._observed:
            return None
        return raw[8:]

    def get(self, key: bytes) -> bytes | None:
        self._ensure_built()
        if key in _RESERVED:
            return None
        return self._live(self.inner.get(key))

    def _rows(self, rows: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        self._ensure_built()
        for key, raw in rows:
            if key not in _RESERVED:
                value = self._live(raw)
                if value is not None:
                    yield key, value

    def range(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self._rows(self.inner.range(from_key, to_key))

    def reverse_range(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self._rows(self.inner.reverse_range(from_key, to_key))

    def all(self) -> Iterator[tuple[bytes, bytes]]:
        return self._rows(self.inner.all())

    def reverse_all(self) -> Iterator[tuple[bytes, bytes]]:
        return self._rows(self.inner.reverse_all())

    def approximate_num_entries(self) -> int:
        return int(self.inner.approximate_num_entries())

    # -- writes ----------------------------------------------------------------------------

    def put(self, key: bytes, value: bytes | None) -> None:
        self._ensure_built()
        if key in _RESERVED:
            raise InvalidRecordError(f"store {self.name!r}: the key {key!r} is reserved (time to live)")
        previous = self.inner.get(key)
        stamp = self._timestamp()
        if value is None or stamp + self.time_to_live_ms <= self._observed:  # a delete, or expired at once
            self.inner.delete(key)
            self._keep_clock(previous, None)
            return
        self.inner.put(key, _TS.pack(stamp) + value)
        self._keep_clock(previous, stamp)
        heapq.heappush(self._queue, (stamp, key))
        self._advance(stamp)

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        existing = self.get(key)
        if existing is None:
            self.put(key, value)
        return existing

    def put_all(self, entries: Any) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: bytes) -> bytes | None:
        existing = self.get(key)
        previous = self.inner.get(key)
        self.inner.delete(key)
        self._keep_clock(previous, None)
        return existing

    def _keep_clock(self, previous: bytes | None, stamp: int | None) -> None:
        """The row ``previous`` may have carried stream time: when it goes (``stamp`` None) or
        gets an older stamp, stream time is written to the clock row."""
        if previous is None or key_stamp(previous) < self._observed:
            return
        if stamp is None or stamp < self._observed:
            self.inner.put(TTL_CLOCK_KEY, _TS.pack(self._observed))

    # -- maintenance -----------------------------------------------------------------------

    def enforce_retention(self, now_ms: int) -> RetentionResult:
        """Move stream time to ``max(stream time, now_ms)``, delete the keys expired by then
        (changelog tombstones) and log the cut-off (a marker row, once per new cut-off)."""
        if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < 0:
            raise InvalidRecordError(f"enforce_retention needs now_ms as an int >= 0, got {now_ms!r}")
        self._ensure_built()
        before = self._observed
        stats_before = self.inner.stats()
        written = 0
        if now_ms > self._cutoff:
            self._cutoff = now_ms
            self.inner.put(TTL_CUTOFF_KEY, encode_cutoff(now_ms))
            written += 1
        self._observed = max(self._observed, now_ms)
        deleted = self._sweep()
        stats_after = self.inner.stats()
        return RetentionResult(
            now_ms=now_ms,
            observed_stream_time_before=None if before == _NONE else before,
            observed_stream_time_after=None if self._observed == _NONE else self._observed,
            min_live_segment=None,
            segments_dropped=(),
            bytes_before=stats_before.bytes_on_disk,
            bytes_after=stats_after.bytes_on_disk,
            rows_before=stats_before.approximate_num_entries,
            rows_after=stats_after.approximate_num_entries,
            cutoff_ms=self._cutoff,
            changelog_records_written=written + deleted,
            rows_dropped=deleted,
        )
