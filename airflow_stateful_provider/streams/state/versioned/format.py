"""Byte layout of a versioned store's segment row (all of one key's versions in one segment).

::

    next_ts (8 bytes BE, signed) | count (4 bytes BE)
    count x [ valid_from (8 bytes BE) | value length (4 bytes BE, -1 = tombstone) | value bytes ]

Entries are sorted by ``valid_from`` and contiguous: entry i is valid until entry
i + 1's ``valid_from``, the last one until ``next_ts``. When ``next_ts`` equals the
last entry's ``valid_from`` and that entry is a tombstone, the tombstone is the key's
newest version (valid forever; a "degenerate" entry, as Kafka calls it).

Why interleaved rather than index-then-values (Kafka's choice): the hot path, a newer
version pushing the previous latest value into a segment, is then an append: the old
row bytes plus one entry, with a new header, and no parsing.
"""

from __future__ import annotations

import struct

__all__ = ["HEADER", "decode_row", "encode_row", "find_in_row", "row_append", "row_first_from", "row_next_ts"]

HEADER = struct.Struct(">qI")
ENTRY = struct.Struct(">qi")
_HEADER_SIZE = HEADER.size
_ENTRY_SIZE = ENTRY.size
_header_pack = HEADER.pack
_header_unpack_from = HEADER.unpack_from
_entry_pack = ENTRY.pack
_entry_unpack_from = ENTRY.unpack_from


def encode_entry(valid_from: int, value: bytes | None) -> bytes:
    if value is None:
        return _entry_pack(valid_from, -1)
    return _entry_pack(valid_from, len(value)) + value


def encode_row(next_ts: int, froms: list[int], values: list[bytes | None]) -> bytes:
    parts = [_header_pack(next_ts, len(froms))]
    for valid_from, value in zip(froms, values, strict=True):
        if value is None:
            parts.append(_entry_pack(valid_from, -1))
        else:
            parts.append(_entry_pack(valid_from, len(value)))
            parts.append(value)
    return b"".join(parts)


def decode_row(row: bytes) -> tuple[int, list[int], list[bytes | None]]:
    """``(next_ts, valid_froms, values)``; values are None for tombstones."""
    next_ts, count = _header_unpack_from(row, 0)
    froms: list[int] = []
    values: list[bytes | None] = []
    pos = _HEADER_SIZE
    for _ in range(count):
        valid_from, length = _entry_unpack_from(row, pos)
        pos += _ENTRY_SIZE
        froms.append(valid_from)
        if length < 0:
            values.append(None)
        else:
            values.append(row[pos : pos + length])
            pos += length
    return next_ts, froms, values


def row_next_ts(row: bytes) -> int:
    next_ts: int = _header_unpack_from(row, 0)[0]
    return next_ts


def row_first_from(row: bytes) -> int:
    first_from: int = _entry_unpack_from(row, _HEADER_SIZE)[0]
    return first_from


def row_append(row: bytes | None, entries: bytes, count: int, next_ts: int) -> bytes:
    """Append already-encoded entries (which must start at the row's ``next_ts``)."""
    if row is None:
        return _header_pack(next_ts, count) + entries
    return _header_pack(next_ts, _header_unpack_from(row, 0)[1] + count) + row[_HEADER_SIZE:] + entries


def find_in_row(row: bytes, timestamp: int) -> tuple[int, int, bytes | None] | None:
    """The entry valid at ``timestamp`` as ``(valid_from, valid_to, value)``, or None when
    ``timestamp`` is before the first entry or at/after ``next_ts``."""
    next_ts, count = _header_unpack_from(row, 0)
    if timestamp >= next_ts or not count:
        return None
    pos = _HEADER_SIZE
    valid_from, length = _entry_unpack_from(row, pos)
    if timestamp < valid_from:
        return None
    for _ in range(count - 1):
        pos += _ENTRY_SIZE
        value_pos = pos
        if length >= 0:
            pos += length
        next_from, next_length = _entry_unpack_from(row, pos)
        if timestamp < next_from:
            return valid_from, next_from, (row[value_pos : value_pos + length] if length >= 0 else None)
        valid_from, length = next_from, next_length
    pos += _ENTRY_SIZE
    return valid_from, next_ts, (row[pos : pos + length] if length >= 0 else None)
