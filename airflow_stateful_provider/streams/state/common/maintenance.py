"""What the maintenance primitives report: ``stats()``, ``enforce_retention()``, ``compact()``.

The Airflow maintenance operators and the CLI print and push these to XCom, so
they are plain frozen dataclasses with :meth:`as_dict` giving JSON-ready dicts.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["CompactionResult", "RetentionResult", "SegmentInfo", "StoreStats"]


class _AsDict:
    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(cast("DataclassInstance", self))  # every subclass is a dataclass


@dataclasses.dataclass(frozen=True)
class SegmentInfo(_AsDict):
    """One segment: its id and the inclusive time range of the rows it holds
    (session end times, or version valid_to times)."""

    segment_id: int
    start_ms: int
    end_ms: int

    @classmethod
    def of(cls, segment_id: int, interval: int) -> SegmentInfo:
        return cls(segment_id, segment_id * interval, (segment_id + 1) * interval - 1)


@dataclasses.dataclass(frozen=True)
class StoreStats(_AsDict):
    """A store's size and time position.

    ``approximate_num_entries`` is RocksDB's estimate (rows, not versions or sessions
    for segmented stores). ``observed_stream_time`` is None before the first write.
    """

    store_type: str
    name: str
    path: str | None
    approximate_num_entries: int
    bytes_on_disk: int
    observed_stream_time: int | None = None
    retention_ms: int | None = None
    segment_interval_ms: int | None = None
    live_segments: tuple[SegmentInfo, ...] = ()


@dataclasses.dataclass(frozen=True)
class RetentionResult(_AsDict):
    """Outcome of ``enforce_retention(now_ms)``.

    ``observed_stream_time_after`` is ``max(before, now_ms)``: dropping data as of
    ``now_ms`` also moves the store's notion of time there, so later writes and
    reads agree with what was dropped.
    """

    now_ms: int
    observed_stream_time_before: int | None
    observed_stream_time_after: int | None
    min_live_segment: int | None
    segments_dropped: tuple[SegmentInfo, ...]
    bytes_before: int
    bytes_after: int
    #: rows (RocksDB's estimate; exact in memory) and live segments before and after
    rows_before: int = 0
    rows_after: int = 0
    segments_before: int = 0
    segments_after: int = 0
    #: the store's cut-off after the run (cutoff.py), and the records the run wrote to the
    #: changelog (an active task's logged store: a tombstone per dropped session or expired
    #: key, and the marker when its cut-off moved; other copies write none)
    cutoff_ms: int | None = None
    changelog_records_written: int = 0
    #: rows dropped, counted exactly: the sessions (session stores) or segment rows (versioned
    #: RocksDB stores) of the dropped segments, the expired keys (key-value TTL); 0 when unknown
    #: (in-memory versioned stores)
    rows_dropped: int = 0


@dataclasses.dataclass(frozen=True)
class CompactionResult(_AsDict):
    """Outcome of ``compact()``: RocksDB files before and after a full manual compaction."""

    bytes_before: int
    bytes_after: int
    duration_s: float
