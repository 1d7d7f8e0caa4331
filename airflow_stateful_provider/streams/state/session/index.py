"""The time index of session stores: sessions ordered by end, for emit-on-window-close.

A session aggregation that emits on window close asks its store, each time the window
close time advances, for the sessions that ended below it since the previous advance
(``find_sessions_by_end``). Session rows are ordered by key first, which is what the
merge lookup of every record needs; answering by end from them means scanning the live
segments, once per advance, so the work grows with the square of the input. The index
orders the same sessions by end: an advance costs a seek plus the sessions that closed.
Kafka Streams keeps the same second ordering in the time-ordered session store it gives
emit-on-window-close aggregations (KIP-825).

RocksDB layout, in the session store's own RocksDB (see rocksdb.py for the session rows)::

    0x00 "time_index"                                          -> b"1": every session is indexed
    0x03 | end (8 bytes BE) | start (8 bytes BE) | record key  -> b""

An index row is the session's changelog key (key | end | start) with the key moved to the
end, so a changelog restore writes it from the record alone; the changelog itself is the
same with or without the index. The index row is written before the session row and
deleted after it: a store that comes back without its write-ahead log holds a prefix of
the writes, so it never has a session the index misses. An index row whose session is
gone is skipped by the query.

In-memory stores keep the index as a sorted list (:class:`SessionEndIndex`); they always
have it.
"""

from __future__ import annotations

import struct
from bisect import bisect_left

__all__ = ["INDEX_END", "INDEX_PREFIX", "TIME_INDEX_KEY", "SessionEndIndex", "index_bound", "index_row"]

#: First byte of every index row.
INDEX_PREFIX = b"\x03"
#: Every index row sorts below this.
INDEX_END = b"\x04"
#: Marker row: present once the index covers every session of the store.
TIME_INDEX_KEY = b"\x00time_index"
_I64 = struct.Struct(">q")


def index_row(changelog_key: bytes) -> bytes:
    """The index row key of the session whose changelog key (key | end | start) is given."""
    return INDEX_PREFIX + changelog_key[-16:] + changelog_key[:-16]


def index_bound(end: int) -> bytes:
    """Index row keys of sessions ending before ``end`` sort below this (end >= 0)."""
    return INDEX_PREFIX + _I64.pack(end)


class SessionEndIndex:
    """The sessions of an in-memory store as a list of ``(end, key, start)`` kept sorted.

    Sessions are created and merged near the newest end and expire from the oldest, so
    inserts and deletes touch the tail of the list and expiry cuts its head.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: list[tuple[int, bytes, int]] = []

    def add(self, key: bytes, start: int, end: int) -> None:
        entries, entry = self._entries, (end, key, start)
        if not entries or entries[-1] < entry:
            entries.append(entry)
            return
        at = bisect_left(entries, entry)
        if entries[at] != entry:
            entries.insert(at, entry)

    def discard(self, key: bytes, start: int, end: int) -> None:
        entries, entry = self._entries, (end, key, start)
        at = bisect_left(entries, entry)
        if at < len(entries) and entries[at] == entry:
            del entries[at]

    def drop_below(self, end: int) -> None:
        """Forget the sessions ending before ``end``."""
        del self._entries[: bisect_left(self._entries, (end,))]

    def ending_between(self, earliest_end: int, latest_end: int) -> list[tuple[int, bytes, int]]:
        """``(end, key, start)`` of the sessions with end in [earliest_end, latest_end], in that order."""
        entries = self._entries
        return entries[bisect_left(entries, (earliest_end,)): bisect_left(entries, (latest_end + 1,))]

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
