"""Time segments: how session and versioned stores expire data in whole chunks.

A segment holds the rows whose segment timestamp (a session's end, a version's
valid_to) falls in ``[id * interval, (id + 1) * interval)``. Given the store's
observed stream time ``t`` and retention ``r``, segments with
``id < (t - r) // interval`` are dead: they are dropped whole, and writes into
them are discarded (SEMANTICS §4, §5).
"""

from __future__ import annotations

import bisect
import struct

__all__ = [
    "SEGMENT_PREFIX",
    "SegmentSet",
    "min_live_segment",
    "segment_prefix",
    "session_segment_interval",
    "versioned_segment_interval",
]

_SEG = struct.Struct(">q")
#: First byte of every segment row key in a segmented RocksDB store.
SEGMENT_PREFIX = b"\x02"


def session_segment_interval(retention_ms: int) -> int:
    """Kafka's session store segment interval: ``max(retention / 2, 60000)``."""
    return max(retention_ms // 2, 60_000)


def versioned_segment_interval(history_retention_ms: int) -> int:
    """Kafka's default versioned store segment interval by history retention (SEMANTICS §5)."""
    hr = history_retention_ms
    if hr <= 60_000:
        return max(hr // 3, 2_000)
    if hr <= 300_000:
        return max(hr // 5, 20_000)
    if hr <= 3_600_000:
        return max(hr // 12, 60_000)
    return max(hr // 24, 300_000)


def min_live_segment(observed_stream_time: int, retention_ms: int, interval: int) -> int:
    """Smallest live segment id; everything below it is expired."""
    return (observed_stream_time - retention_ms) // interval


def segment_prefix(segment_id: int) -> bytes:
    """Row key prefix of a segment: marker byte + id as 8 bytes big-endian (sorts by id)."""
    return SEGMENT_PREFIX + _SEG.pack(segment_id)


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

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(list(self.ids))

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"SegmentSet({self.ids})"
