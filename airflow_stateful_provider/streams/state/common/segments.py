"""Time segments: how session and versioned stores expire data in whole chunks.

A segment holds the rows whose segment timestamp (a session's end, a version's
valid_to) falls in ``[id * interval, (id + 1) * interval)``. Given the store's
observed stream time ``t`` and retention ``r``, segments with
``id < (t - r) // interval`` are dead: they are dropped whole, and writes into
them are discarded (docs/semantics.md §4, §5).

Besides the arithmetic, this module holds what the segmented stores share:
:class:`SegmentedStore` (observed stream time, expiry, retention runs and stats, for
the RocksDB and the in-memory implementations alike) and
:class:`SegmentedRocksDBStore` (the RocksDB rows both persistent ones keep the same
way: the observed stream time row and the segment key prefix).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import ClassVar

from airflow_stateful_provider.streams.errors import InvalidRecordError
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.cutoff import split_at_cutoffs
from airflow_stateful_provider.streams.state.common.maintenance import RetentionResult, SegmentInfo, StoreStats
from airflow_stateful_provider.streams.state.common.rocks import RocksDBStore

__all__ = [
    "CUTOFF_KEY",
    "NO_TIMESTAMP",
    "OBSERVED_KEY",
    "SEGMENT_PREFIX",
    "SegmentSet",
    "SegmentedRocksDBStore",
    "SegmentedStore",
    "min_live_segment",
    "segment_clock",
    "segment_prefix",
]

_I64 = struct.Struct(">q")
#: First byte of every segment row key in a segmented RocksDB store.
SEGMENT_PREFIX = b"\x02"
#: RocksDB key of a segmented store's observed stream time (8 bytes big-endian).
OBSERVED_KEY = b"\x00observed_stream_time"
#: RocksDB key of a segmented store's retention cut-off (8 bytes big-endian; cutoff.py).
CUTOFF_KEY = b"\x00retention_cutoff"
#: Observed stream time before the first write.
NO_TIMESTAMP = -1
_SEG_MARK = SEGMENT_PREFIX[0]


def min_live_segment(observed_stream_time: int, retention_ms: int, interval: int) -> int:
    """Smallest live segment id; everything below it is expired."""
    return (observed_stream_time - retention_ms) // interval


def segment_prefix(segment_id: int) -> bytes:
    """Row key prefix of a segment: marker byte + id as 8 bytes big-endian (sorts by id)."""
    return SEGMENT_PREFIX + _I64.pack(segment_id)


def segment_clock(store: object) -> SegmentedStore | None:
    """The segmented byte store under a store as processors see it (typed, cached,
    changelogging layers unwrapped through their ``inner``), or None: what a processor reads
    the store's observed stream time and retention cut-off from."""
    seen = 0
    while not isinstance(store, SegmentedStore) and seen < 16:
        store = getattr(store, "inner", None)
        if store is None:
            return None
        seen += 1
    return store if isinstance(store, SegmentedStore) else None


class SegmentSet:
    """Sorted ids of the segments that (may) hold rows.

    Kept in memory so reads probe only existing segments; a stale id (a segment whose
    last row was deleted) costs one empty lookup, never a wrong answer.
    """

    __slots__ = ("ids", "_members")

    def __init__(self, ids: list[int] | None = None) -> None:
        self.ids: list[int] = sorted(set(ids or ()))
        self._members = set(self.ids)

    def add(self, segment_id: int) -> None:
        if segment_id not in self._members:
            self._members.add(segment_id)
            bisect.insort(self.ids, segment_id)

    def __contains__(self, segment_id: int) -> bool:
        return segment_id in self._members

    def from_id(self, segment_id: int) -> list[int]:
        """Ids >= ``segment_id``, ascending."""
        ids = self.ids
        return ids[bisect.bisect_left(ids, segment_id):]

    def up_to(self, segment_id: int) -> list[int]:
        """Ids <= ``segment_id``, ascending."""
        ids = self.ids
        return ids[: bisect.bisect_right(ids, segment_id)]

    def drop_below(self, segment_id: int) -> list[int]:
        """Forget ids < ``segment_id``; returns them."""
        ids = self.ids
        cut = bisect.bisect_left(ids, segment_id)
        if not cut:
            return []
        dropped = ids[:cut]
        del ids[:cut]
        self._members.difference_update(dropped)
        return dropped

    def __iter__(self) -> Iterator[int]:
        return iter(list(self.ids))

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"SegmentSet({self.ids})"


class SegmentedStore:
    """Observed stream time and segment expiry, shared by the session and versioned stores
    in both implementations, so that all four expire, enforce retention and report alike.

    Subclasses call :meth:`_init_segments` when they are built and provide
    :meth:`_expire` (forget the rows of dead segments) and :meth:`_live_segment_ids`.
    """

    store_type: ClassVar[str]
    name: str
    segment_interval_ms: int
    dropped_writes: int
    #: how far behind observed stream time a segment stays live: the session retention
    #: or the versioned history retention (also public under those names)
    _segment_retention_ms: int
    _observed: int
    _min_live: int
    _check_writable: Callable[[], None]  # from the store base: open, and not read-only
    #: the key of this kind's cut-off marker in its changelog (cutoff.py)
    cutoff_marker_key: ClassVar[bytes]
    #: the largest ``now_ms`` retention was enforced at (here or by a restored marker)
    _cutoff: int = NO_TIMESTAMP
    stats: Callable[[], StoreStats]

    def _init_segments(self, retention_ms: int, interval_ms: int) -> None:
        self._segment_retention_ms = retention_ms
        self.segment_interval_ms = interval_ms
        self.dropped_writes = 0
        self._cutoff = NO_TIMESTAMP
        self._set_observed(NO_TIMESTAMP)

    @property
    def retention_cutoff(self) -> int | None:
        """The ``now_ms`` of the latest retention run this store reached (applied here or
        restored from its changelog's marker), None when there was none. Observed stream
        time never goes below it."""
        return None if self._cutoff == NO_TIMESTAMP else self._cutoff

    def apply_cutoff(self, cutoff_ms: int) -> None:
        """Reach a retention run's cut-off: observed stream time moves to
        ``max(observed, cutoff_ms)``, dropping the segments that died (what a restore does on
        reading a cut-off marker; enforce_retention does it and also reclaims the space)."""
        if cutoff_ms > self._cutoff:
            self._cutoff = cutoff_ms
        if cutoff_ms > self._observed:
            self._advance(cutoff_ms)

    def _restore_runs(self, records: Iterable[ChangelogRecord],
                      restore_run: Callable[[list[ChangelogRecord]], int]) -> int:
        """restore_batch around the kind's own replay: runs of records between cut-off markers
        replayed in order, each marker applied where it stands (cutoff.py)."""
        applied = 0
        for run, cutoff in split_at_cutoffs(records, self.cutoff_marker_key):
            if run:
                applied += restore_run(run)
            if cutoff is not None:
                self.apply_cutoff(cutoff)
        return applied

    def _set_observed(self, observed: int) -> None:
        self._observed = observed
        self._min_live = min_live_segment(observed, self._segment_retention_ms, self.segment_interval_ms)

    @property
    def observed_stream_time(self) -> int:
        """Largest timestamp written (session end, version timestamp); -1 before the first."""
        return self._observed

    def _advance(self, timestamp: int) -> None:
        """Move observed stream time forward; drop segments that died."""
        self._observed = timestamp
        new_min = (timestamp - self._segment_retention_ms) // self.segment_interval_ms
        if new_min > self._min_live:
            self._min_live = new_min
            self._expire(new_min)

    def _expire(self, min_live: int) -> None:
        """Hook: forget every row in segments below ``min_live``."""
        raise NotImplementedError

    def _live_segment_ids(self) -> Iterable[int]:
        """Hook: ascending ids of the segments that hold rows."""
        raise NotImplementedError

    # -- maintenance -----------------------------------------------------------------------

    def enforce_retention(self, now_ms: int) -> RetentionResult:
        """Drop every segment expired as of ``now_ms``, even if stream time stalled.

        Observed stream time moves to ``max(observed, now_ms)`` so later writes and reads
        agree with what was dropped.
        """
        self._check_writable()
        if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < 0:
            raise InvalidRecordError(f"enforce_retention needs now_ms as an int >= 0, got {now_ms!r}")
        bytes_before = self._settle()
        before = self._observed
        rows_before = self.stats().approximate_num_entries
        segments_before = len(list(self._live_segment_ids()))
        new_min = min_live_segment(max(before, now_ms), self._segment_retention_ms, self.segment_interval_ms)
        dropped = [s for s in self._live_segment_ids() if s < new_min]
        rows_dropped = self._count_rows(dropped)
        self.apply_cutoff(now_ms)
        bytes_after = self._reclaim(dropped)
        return RetentionResult(
            now_ms=now_ms,
            observed_stream_time_before=None if before == NO_TIMESTAMP else before,
            observed_stream_time_after=None if self._observed == NO_TIMESTAMP else self._observed,
            min_live_segment=self._min_live,
            segments_dropped=self._segment_infos(dropped),
            bytes_before=bytes_before,
            bytes_after=bytes_after,
            rows_before=rows_before,
            rows_after=self.stats().approximate_num_entries,
            segments_before=segments_before,
            segments_after=len(list(self._live_segment_ids())),
            cutoff_ms=self._cutoff,
            rows_dropped=rows_dropped,
        )

    def expiring_changelog_keys(self, now_ms: int) -> Iterator[bytes]:
        """The changelog keys of the rows ``enforce_retention(now_ms)`` will drop, read before
        it runs: the active task logs a tombstone for each (docs/maintenance.md, "Tombstones"),
        so that compaction removes them and a restore does not read them."""
        new_min = min_live_segment(max(self._observed, now_ms), self._segment_retention_ms, self.segment_interval_ms)
        return self._changelog_keys([s for s in self._live_segment_ids() if s < new_min])

    def _changelog_keys(self, segment_ids: list[int]) -> Iterator[bytes]:
        """Hook: the changelog keys of the rows of ``segment_ids`` that a tombstone removes
        (none by default: a versioned store's dropped versions are each superseded by a newer
        record of the same key in its changelog, and a tombstone would delete the key)."""
        return iter(())

    def _settle(self) -> int:
        """Hook: bring the files up to date before a retention run; returns their size."""
        return 0

    def _count_rows(self, segment_ids: list[int]) -> int:
        """Hook: how many rows the segments hold (what a retention run drops; one scan of them)."""
        return 0

    def _reclaim(self, dropped: list[int]) -> int:
        """Hook: give back the space of the ``dropped`` segments; returns the size after."""
        return 0

    def _segment_infos(self, ids: Iterable[int]) -> tuple[SegmentInfo, ...]:
        interval = self.segment_interval_ms
        return tuple(SegmentInfo.of(s, interval) for s in ids)

    def _segment_stats(self, path: str | None, approximate_num_entries: int, bytes_on_disk: int) -> StoreStats:
        return StoreStats(
            store_type=self.store_type,
            name=self.name,
            path=path,
            approximate_num_entries=approximate_num_entries,
            bytes_on_disk=bytes_on_disk,
            observed_stream_time=None if self._observed == NO_TIMESTAMP else self._observed,
            retention_ms=self._segment_retention_ms,
            segment_interval_ms=self.segment_interval_ms,
            live_segments=self._segment_infos(self._live_segment_ids()),
        )


class SegmentedRocksDBStore(RocksDBStore, SegmentedStore):
    """The RocksDB side of the segmented stores: observed stream time persisted under
    :data:`OBSERVED_KEY` on flush, segment rows under :func:`segment_prefix`, and the live
    segment ids kept in memory (scanned on open and after a secondary catch-up).
    """

    _segments: SegmentSet
    _persisted_observed: int
    _persisted_cutoff: int

    def _open_segments(self, retention_setting: str) -> None:
        """Second step of opening, once the metadata is read: the stored setting
        ``retention_setting`` is the retention that decides when segments die."""
        self._init_segments(self.metadata.settings[retention_setting], self.metadata.settings["segment_interval_ms"])
        self._load_state()

    def _load_state(self) -> None:
        raw = self._db.get(OBSERVED_KEY)
        self._set_observed(NO_TIMESTAMP if raw is None else _I64.unpack(raw)[0])
        self._persisted_observed = self._observed
        raw = self._db.get(CUTOFF_KEY)
        self._cutoff = NO_TIMESTAMP if raw is None else _I64.unpack(raw)[0]
        self._persisted_cutoff = self._cutoff
        self._segments = SegmentSet(self._scan_segment_ids())

    def _scan_segment_ids(self) -> list[int]:
        """One seek per segment: jump from each segment's first row to the next segment."""
        ids = []
        it = self._db.iter()
        it.seek(SEGMENT_PREFIX)
        while it.valid():
            key = it.key()
            if key[0] != _SEG_MARK:
                break
            segment_id = _I64.unpack_from(key, 1)[0]
            ids.append(segment_id)
            it.seek(segment_prefix(segment_id + 1))
        return ids

    def _on_flush(self) -> None:
        if self._observed != self._persisted_observed:
            self._db.put(OBSERVED_KEY, _I64.pack(self._observed))
            self._persisted_observed = self._observed
        if self._cutoff != self._persisted_cutoff:
            self._db.put(CUTOFF_KEY, _I64.pack(self._cutoff))
            self._persisted_cutoff = self._cutoff

    def _on_refresh(self) -> None:
        self._load_state()

    def _expire(self, min_live: int) -> None:
        dropped = self._segments.drop_below(min_live)
        if dropped:
            self._delete_segments(segment_prefix(dropped[0]), segment_prefix(min_live))

    def _delete_segments(self, begin: bytes, end: bytes) -> None:
        """Delete the segment rows in ``[begin, end)``; a hook for stores that buffer writes."""
        self._db.delete_range(begin, end)

    def _live_segment_ids(self) -> list[int]:
        return self._segments.ids

    def _count_rows(self, segment_ids: list[int]) -> int:
        count = 0
        for segment_id in segment_ids:
            prefix = segment_prefix(segment_id)
            it, _bound = self._iter_below(segment_prefix(segment_id + 1))
            it.seek(prefix)
            while it.valid() and it.key().startswith(prefix):
                count += 1
                it.next()
        return count

    def _settle(self) -> int:
        self._on_flush()
        self._db.flush(True)
        return self.bytes_on_disk()

    def _reclaim(self, dropped: list[int]) -> int:
        # the range is deleted already; compacting it is what returns the space
        if dropped:
            self._db.compact_range(segment_prefix(dropped[0]), segment_prefix(dropped[-1] + 1))
        return self._settle()

    def stats(self) -> StoreStats:
        self._check_open()
        return self._segment_stats(self.path, self._rocksdb_int("rocksdb.estimate-num-keys"), self.bytes_on_disk())
