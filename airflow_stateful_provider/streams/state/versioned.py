"""Versioned key-value stores (KIP-889): per key a timeline of versions, RocksDB and in-memory.

Semantics (SEMANTICS §5): a version is ``(valid_from, value or tombstone)``; it is
valid until the next version's ``valid_from``. ``put`` returns that ``valid_to``,
``-1`` (:data:`VALID_TO_UNDEFINED`) when the version is the newest, or
:data:`NOT_PUT` when it is older than ``observed stream time - history retention``.
``get(key, as_of)`` beyond history retention answers only from the newest version.

RocksDB layout, one RocksDB per store, three key spaces told apart by the first byte::

    0x00 "observed_stream_time"          -> 8 bytes BE
    0x01 | key                           -> latest value store: valid_from (8 bytes BE) | value
    0x02 | segment id (8 bytes BE) | key -> segment row (see versioned_format.py)

Placement invariant: the newest version, when not a tombstone, is in the latest value
store; every other version is in the row of segment ``valid_to // interval``; a
newest tombstone sits in segment ``valid_from // interval`` with ``valid_to ==
valid_from``. Hence expiry is "drop segments below ``(observed - HR) // interval``",
and a row is a contiguous run of the key's timeline.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import rocksdict

from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import ConfigError, InvalidRecordError
from airflow_stateful_provider.streams.serdes import serde_name
from airflow_stateful_provider.streams.state.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.maintenance import StoreStats
from airflow_stateful_provider.streams.state.memory import InMemoryStore
from airflow_stateful_provider.streams.state.metadata import StoreMetadata, StoreType
from airflow_stateful_provider.streams.state.segments import (
    SEGMENT_PREFIX,
    SegmentedRocksDBStore,
    SegmentedStore,
    versioned_segment_interval,
)
from airflow_stateful_provider.streams.state.versioned_format import (
    ENTRY,
    HEADER,
    decode_row,
    encode_row,
    find_in_row,
)

__all__ = [
    "NOT_PUT",
    "VALID_TO_UNDEFINED",
    "InMemoryVersionedKeyValueStore",
    "RocksDBVersionedKeyValueStore",
    "VersionedKeyValueStore",
    "VersionedRecord",
]

#: ``put`` return: the version was older than history retention and was not stored.
NOT_PUT = -(1 << 63)
#: ``put`` return: the version is the newest one, so its validity has no end yet.
VALID_TO_UNDEFINED = -1
_MAX_TS = (1 << 63) - 1

_I64 = struct.Struct(">q")
_SEGP = struct.Struct(">Bq")  # segment marker, segment id (segment_prefix in one pack)
_LATEST = b"\x01"
_SEG_MARK = SEGMENT_PREFIX[0]
_HDR_SIZE = HEADER.size


class VersionedRecord(NamedTuple):
    """A version returned by reads: value, ``timestamp`` (= valid_from) and ``valid_to``
    (None for the newest version)."""

    value: bytes
    timestamp: int
    valid_to: int | None = None


@runtime_checkable
class VersionedKeyValueStore(Protocol):
    """Kafka Streams' ``VersionedKeyValueStore<Bytes, byte[]>`` in snake_case."""

    name: str
    persistent: bool
    history_retention_ms: int

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int: ...

    def delete(self, key: bytes, timestamp: int) -> VersionedRecord | None: ...

    def get(self, key: bytes, as_of: int | None = None) -> VersionedRecord | None: ...

    def get_versions(
        self, key: bytes, from_time: int | None = None, to_time: int | None = None, ascending: bool = False
    ) -> list[VersionedRecord]: ...

    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def _history_retention(value: int | Any) -> int:
    return duration_ms(value, "history retention", minimum=0)


def _segment_interval(value: int | Any | None, history_retention_ms: int) -> int:
    if value is None:
        return versioned_segment_interval(history_retention_ms)
    ms = duration_ms(value, "segment interval")
    if ms < 1:
        raise ConfigError(f"versioned store segment interval must be > 0 ms, got {ms} ms")
    return ms


def _bad_put(key: object, value: object, timestamp: object) -> InvalidRecordError:
    if key is None:
        return InvalidRecordError("versioned store key cannot be null (None)")
    if type(key) is not bytes:
        return InvalidRecordError(f"versioned store keys must be bytes, got {type(key).__name__} {key!r:.80}")
    if value is not None and type(value) is not bytes:
        return InvalidRecordError(
            f"versioned store values must be bytes or None, got {type(value).__name__} {value!r:.80}"
        )
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        return InvalidRecordError(f"timestamp must be an int (ms), got {type(timestamp).__name__} {timestamp!r}")
    return InvalidRecordError(f"timestamp must be >= 0 and fit in 64 bits, got {timestamp}")


def _check_key(key: object) -> None:
    if type(key) is not bytes:
        raise _bad_put(key, None, 0)


def _check_time(value: object, what: str) -> None:
    if value is not None and type(value) is not int:
        raise InvalidRecordError(f"{what} must be int ms or None, got {type(value).__name__} {value!r}")


class _VersionedBase(SegmentedStore):
    """What both implementations do the same way around their own ``_do_put``: the
    history retention check on writes, argument checks, and changelog replay
    (observed stream time is the largest accepted put timestamp)."""

    history_retention_ms: int
    read_only: bool
    _open: bool
    _check_open: Callable[[], None]
    _do_put: Callable[[bytes, bytes | None, int], int]
    get: Callable[[bytes, int | None], VersionedRecord | None]

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        """Insert or replace the version of ``key`` at ``timestamp`` (None = tombstone).

        Returns the version's valid_to, :data:`VALID_TO_UNDEFINED` (-1) when it is the
        newest, or :data:`NOT_PUT` when it is older than history retention.
        """
        if (
            type(key) is not bytes
            or (value is not None and type(value) is not bytes)
            or type(timestamp) is not int
            or timestamp < 0
            or timestamp > _MAX_TS
        ):
            raise _bad_put(key, value, timestamp)
        if self.read_only or not self._open:
            self._check_writable()
        observed = self._observed
        if timestamp < observed - self.history_retention_ms:
            self.dropped_writes += 1
            return NOT_PUT
        if timestamp > observed:
            self._advance(timestamp)
        return self._do_put(key, value, timestamp)

    def delete(self, key: bytes, timestamp: int) -> VersionedRecord | None:
        """Put a tombstone at ``timestamp``; returns the version that was valid there before
        (None when none, or when ``timestamp`` is beyond history retention)."""
        if type(key) is not bytes or type(timestamp) is not int or timestamp < 0 or timestamp > _MAX_TS:
            raise _bad_put(key, None, timestamp)
        self._check_writable()
        if timestamp < self._observed - self.history_retention_ms:
            self.dropped_writes += 1
            return None
        existing = self.get(key, timestamp)
        if timestamp > self._observed:
            self._advance(timestamp)
        self._do_put(key, None, timestamp)
        return existing

    def _version_range(self, key: bytes, from_time: int | None, to_time: int | None) -> tuple[int, int]:
        """get_versions' arguments checked (and the store open); None bounds open up."""
        _check_key(key)
        _check_time(from_time, "from_time")
        _check_time(to_time, "to_time")
        self._check_open()
        return 0 if from_time is None else from_time, _MAX_TS if to_time is None else to_time

    def _replay(self, records: Iterable[ChangelogRecord]) -> int:
        """restore_batch's loop: records (key, value or None, timestamp = valid_from) applied
        as puts. Returns how many were applied (records beyond history retention at their
        turn are skipped, as the original put skipped them)."""
        applied = 0
        for record in records:
            key = record.key
            if key is None:
                continue
            ts = record.timestamp
            value = record.value
            if (
                type(key) is not bytes
                or (value is not None and type(value) is not bytes)
                or type(ts) is not int
                or ts < 0
                or ts > _MAX_TS
            ):
                raise InvalidRecordError(
                    f"versioned changelog record at offset {record.offset} is invalid: "
                    f"key={key!r:.60} value type={type(value).__name__} timestamp={ts!r}"
                )
            if ts < self._observed - self.history_retention_ms:
                continue
            if ts > self._observed:
                self._advance(ts)
            self._do_put(key, value, ts)
            applied += 1
        return applied


class RocksDBVersionedKeyValueStore(SegmentedRocksDBStore, _VersionedBase):
    """Persistent versioned store: latest value store plus valid_to segments in one RocksDB."""

    store_type: ClassVar[StoreType] = StoreType.VERSIONED

    def __init__(
        self,
        path: str | os.PathLike[str],
        history_retention: int | Any | None = None,
        *,
        segment_interval: int | Any | None = None,
        name: str | None = None,
        key_serde: object = "bytes",
        value_serde: object = "bytes",
        read_only: bool = False,
    ) -> None:
        path = os.fspath(path)
        hr_ms = None if history_retention is None else _history_retention(history_retention)
        if hr_ms is None:
            if segment_interval is not None:
                raise ConfigError("segment_interval given without history_retention")
            if not os.path.isdir(path):
                raise ConfigError(f"creating versioned store {path} needs a history retention")
            interval_ms = None
        else:
            interval_ms = _segment_interval(segment_interval, hr_ms)
        requested = StoreMetadata(
            store_type=StoreType.VERSIONED,
            name=name or os.path.basename(os.path.abspath(path)),
            key_serde=serde_name(key_serde),
            value_serde=serde_name(value_serde),
            history_retention_ms=hr_ms,
            segment_interval_ms=interval_ms,
        )
        super().__init__(path, requested, read_only=read_only)
        self._use_db()
        self._open_segments(self.metadata.history_retention_ms)
        self.history_retention_ms = self._segment_retention_ms

    # -- state kept in memory --------------------------------------------------------------

    def _use_db(self) -> None:
        """Point the put algorithm's primitives at the RocksDB (restore swaps in a buffer)."""
        db = self._db
        self._get = db.get
        self._put = db.put
        self._del = db.delete
        self._batch: rocksdict.WriteBatch | None = None

    def _delete_segments(self, begin: bytes, end: bytes) -> None:
        """During restore a segment drop goes into the write batch, and buffered rows of the
        dropped segments are forgotten."""
        if self._batch is None:
            self._db.delete_range(begin, end)
            return
        self._batch.delete_range(begin, end)
        for row_key in [k for k in self._overlay if begin <= k < end]:
            del self._overlay[row_key]

    # -- writes ----------------------------------------------------------------------------

    def _do_put(self, key: bytes, value: bytes | None, ts: int) -> int:
        get = self._get
        put = self._put
        latest_key = _LATEST + key
        raw = get(latest_key)
        if raw is not None:
            latest_ts = _I64.unpack_from(raw, 0)[0]
            if ts > latest_ts:
                # in order: the previous latest value moves into segment ts // interval
                segment_id = ts // self.segment_interval_ms
                row_key = _SEGP.pack(_SEG_MARK, segment_id) + key
                if segment_id in self._segments:
                    row = get(row_key)
                else:
                    row = None
                    self._segments.add(segment_id)
                moved = ENTRY.pack(latest_ts, len(raw) - 8) + raw[8:]
                count = 1
                if value is None:
                    moved += ENTRY.pack(ts, -1)
                    count = 2
                if row is None:
                    put(row_key, HEADER.pack(ts, count) + moved)
                else:
                    put(row_key, HEADER.pack(ts, HEADER.unpack_from(row, 0)[1] + count) + row[_HDR_SIZE:] + moved)
                if value is None:
                    self._del(latest_key)
                else:
                    put(latest_key, _I64.pack(ts) + value)
                return VALID_TO_UNDEFINED
            if ts == latest_ts:
                if value is None:
                    self._append_newest_tombstone(key, ts)
                    self._del(latest_key)
                else:
                    put(latest_key, _I64.pack(ts) + value)
                return VALID_TO_UNDEFINED
            return self._put_older(key, value, ts, latest_ts)
        return self._put_older(key, value, ts, None)

    def _append_newest_tombstone(self, key: bytes, ts: int) -> None:
        """Record a tombstone that becomes the newest version at ``ts`` (latest value at ts
        is being deleted): degenerate entry in segment ts // interval."""
        segment_id = ts // self.segment_interval_ms
        row_key = _SEGP.pack(_SEG_MARK, segment_id) + key
        row = self._get(row_key) if segment_id in self._segments else None
        self._segments.add(segment_id)
        entry = ENTRY.pack(ts, -1)
        if row is None:
            self._put(row_key, HEADER.pack(ts, 1) + entry)
        else:
            self._put(row_key, HEADER.pack(ts, HEADER.unpack_from(row, 0)[1] + 1) + row[_HDR_SIZE:] + entry)

    def _write_row(self, row_key: bytes, segment_id: int, next_ts: int, froms: list[int], values: list) -> None:
        if froms:
            self._segments.add(segment_id)
            self._put(row_key, encode_row(next_ts, froms, values))
        else:
            self._del(row_key)

    def _put_older(self, key: bytes, value: bytes | None, ts: int, latest_ts: int | None) -> int:
        """General case: ``ts`` is older than the latest value, or there is no latest value."""
        get = self._get
        interval = self.segment_interval_ms
        ts_segment = ts // interval
        ts_row: bytes | None = None
        found: tuple[int, bytes, bytes] | None = None
        for segment_id in self._segments.from_id(ts_segment):
            row_key = _SEGP.pack(_SEG_MARK, segment_id) + key
            row = get(row_key)
            if row is None:
                continue
            if segment_id == ts_segment:
                ts_row = row
            if HEADER.unpack_from(row, 0)[0] > ts:
                found = (segment_id, row_key, row)
                break
        if found is not None:
            return self._put_into_row(key, value, ts, ts_segment, ts_row, *found)
        if latest_ts is not None:
            # nothing but the latest value is after ts: the new version ends where it starts
            segment_id = latest_ts // interval
            row_key = _SEGP.pack(_SEG_MARK, segment_id) + key
            row = ts_row if segment_id == ts_segment else get(row_key)
            self._insert_entry(row_key, segment_id, row, ts, value, latest_ts)
            return latest_ts
        return self._put_after_newest_tombstone(key, value, ts, ts_segment, ts_row)

    def _put_into_row(
        self,
        key: bytes,
        value: bytes | None,
        ts: int,
        ts_segment: int,
        ts_row: bytes | None,
        row_segment: int,
        row_key: bytes,
        row: bytes,
    ) -> int:
        """``row`` is the first row whose versions reach past ``ts``."""
        next_ts, froms, values = decode_row(row)
        interval = self.segment_interval_ms
        if ts < froms[0]:
            # nothing is valid at ts; the new version ends where this row's first one starts
            valid_to = froms[0]
            target = valid_to // interval
            if target == row_segment:
                froms.insert(0, ts)
                values.insert(0, value)
                self._write_row(row_key, row_segment, next_ts, froms, values)
            else:
                target_key = _SEGP.pack(_SEG_MARK, target) + key
                target_row = ts_row if target == ts_segment else self._get(target_key)
                self._insert_entry(target_key, target, target_row, ts, value, valid_to)
            return valid_to
        index = bisect.bisect_right(froms, ts) - 1
        valid_to = froms[index + 1] if index + 1 < len(froms) else next_ts
        if froms[index] == ts:
            values[index] = value
            self._write_row(row_key, row_segment, next_ts, froms, values)
            return valid_to
        if ts_segment == row_segment or index != 0:
            froms.insert(index + 1, ts)
            values.insert(index + 1, value)
            self._write_row(row_key, row_segment, next_ts, froms, values)
            return valid_to
        # the previous version now ends at ts, in an older segment: move it there
        prev_from, prev_value = froms[0], values[0]
        froms[0], values[0] = ts, value
        self._write_row(row_key, row_segment, next_ts, froms, values)
        ts_key = _SEGP.pack(_SEG_MARK, ts_segment) + key
        self._insert_entry(ts_key, ts_segment, ts_row, prev_from, prev_value, ts)
        return valid_to

    def _insert_entry(
        self, row_key: bytes, segment_id: int, row: bytes | None, valid_from: int, value: bytes | None, valid_to: int
    ) -> None:
        """Insert one version (valid until ``valid_to``) into a row, keeping it sorted."""
        if row is None:
            self._write_row(row_key, segment_id, valid_to, [valid_from], [value])
            return
        next_ts, froms, values = decode_row(row)
        index = bisect.bisect_left(froms, valid_from)
        if index < len(froms) and froms[index] == valid_from:
            values[index] = value
        else:
            froms.insert(index, valid_from)
            values.insert(index, value)
        if index == len(froms) - 1:
            next_ts = valid_to
        self._write_row(row_key, segment_id, next_ts, froms, values)

    def _put_after_newest_tombstone(
        self, key: bytes, value: bytes | None, ts: int, ts_segment: int, ts_row: bytes | None
    ) -> int:
        """No latest value and nothing valid after ``ts``: the key is empty or its newest
        version is a tombstone at or before ``ts``."""
        get = self._get
        row_segment, row_key, row = ts_segment, _SEGP.pack(_SEG_MARK, ts_segment) + key, ts_row
        if row is None:
            for segment_id in reversed(self._segments.up_to(ts_segment - 1)):
                candidate_key = _SEGP.pack(_SEG_MARK, segment_id) + key
                candidate = get(candidate_key)
                if candidate is not None:
                    row_segment, row_key, row = segment_id, candidate_key, candidate
                    break
        if row is not None:
            next_ts, froms, values = decode_row(row)
            if values[-1] is None and froms[-1] == next_ts:
                tombstone_ts = next_ts
                if tombstone_ts == ts:
                    if value is not None:  # a value replaces the newest tombstone
                        froms.pop()
                        values.pop()
                        self._write_row(row_key, row_segment, next_ts, froms, values)
                        self._put(_LATEST + key, _I64.pack(ts) + value)
                    return VALID_TO_UNDEFINED
                # the tombstone stops being the newest: it is now valid until ts
                if row_segment == ts_segment:
                    if value is None:
                        froms.append(ts)
                        values.append(None)
                    self._write_row(row_key, row_segment, ts, froms, values)
                else:
                    froms.pop()
                    values.pop()
                    self._write_row(row_key, row_segment, tombstone_ts, froms, values)
                    new_froms: list[int] = [tombstone_ts]
                    new_values: list[bytes | None] = [None]
                    if value is None:
                        new_froms.append(ts)
                        new_values.append(None)
                    self._write_row(_SEGP.pack(_SEG_MARK, ts_segment) + key, ts_segment, ts, new_froms, new_values)
                if value is not None:
                    self._put(_LATEST + key, _I64.pack(ts) + value)
                return VALID_TO_UNDEFINED
        # the key has no (unexpired) versions
        if value is not None:
            self._put(_LATEST + key, _I64.pack(ts) + value)
        else:
            ts_key = _SEGP.pack(_SEG_MARK, ts_segment) + key
            self._insert_entry(ts_key, ts_segment, ts_row, ts, None, ts)
        return VALID_TO_UNDEFINED

    # -- reads -----------------------------------------------------------------------------

    def get(self, key: bytes, as_of: int | None = None) -> VersionedRecord | None:
        """Newest non-tombstone version (``as_of`` None), or the version valid at ``as_of``."""
        if type(key) is not bytes:
            _check_key(key)
        if as_of is not None and type(as_of) is not int:
            _check_time(as_of, "as_of")
        if not self._open:
            self._check_open()
        raw = self._get(_LATEST + key)
        if as_of is None:
            if raw is None:
                return None
            return VersionedRecord(raw[8:], _I64.unpack_from(raw, 0)[0], None)
        if raw is not None:
            latest_ts = _I64.unpack_from(raw, 0)[0]
            if latest_ts <= as_of:
                return VersionedRecord(raw[8:], latest_ts, None)
        if as_of < self._observed - self.history_retention_ms or as_of < 0:
            return None  # beyond history retention only the latest value answers
        get = self._get
        for segment_id in self._segments.from_id(as_of // self.segment_interval_ms):
            row = get(_SEGP.pack(_SEG_MARK, segment_id) + key)
            if row is None or HEADER.unpack_from(row, 0)[0] <= as_of:
                continue
            found = find_in_row(row, as_of)
            if found is None or found[2] is None:
                return None
            return VersionedRecord(found[2], found[0], found[1])
        return None

    def get_versions(
        self, key: bytes, from_time: int | None = None, to_time: int | None = None, ascending: bool = False
    ) -> list[VersionedRecord]:
        """Non-tombstone versions valid at some point in ``[from_time, to_time]``
        (valid_from <= to_time and valid_to > from_time), newest first unless ``ascending``."""
        lo, hi = self._version_range(key, from_time, to_time)
        result: list[VersionedRecord] = []
        raw = self._get(_LATEST + key)
        latest = None
        if raw is not None:
            latest_ts = _I64.unpack_from(raw, 0)[0]
            if latest_ts <= hi:
                latest = VersionedRecord(raw[8:], latest_ts, None)
        if lo <= hi and hi >= self._observed - self.history_retention_ms:
            get = self._get
            for segment_id in self._segments.from_id(max(lo, 0) // self.segment_interval_ms):
                row = get(_SEGP.pack(_SEG_MARK, segment_id) + key)
                if row is None:
                    continue
                next_ts, froms, values = decode_row(row)
                if froms[0] > hi:
                    break
                last = len(froms) - 1
                for index, valid_from in enumerate(froms):
                    value = values[index]
                    if value is None or valid_from > hi:
                        continue
                    valid_to = froms[index + 1] if index < last else next_ts
                    if valid_to > lo:
                        result.append(VersionedRecord(value, valid_from, valid_to))
        if latest is not None and lo <= hi:
            result.append(latest)
        if not ascending:
            result.reverse()
        return result

    # -- restore ---------------------------------------------------------------------------

    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int:
        """Replay changelog records (key, value or None, timestamp = valid_from) as puts,
        buffered and written in one RocksDB write batch. Returns how many were applied
        (records beyond history retention at their turn are skipped, as the original put
        skipped them)."""
        self._check_writable()
        overlay: dict[bytes, bytes | None] = {}
        db_get = self._db.get
        missing = object()

        def get(row_key: bytes) -> bytes | None:
            value = overlay.get(row_key, missing)
            if value is missing:
                return db_get(row_key)
            return value  # type: ignore[return-value]

        def put(row_key: bytes, value: bytes) -> None:
            overlay[row_key] = value

        def delete(row_key: bytes) -> None:
            overlay[row_key] = None

        batch = rocksdict.WriteBatch(raw_mode=True)
        self._get, self._put, self._del, self._batch = get, put, delete, batch
        self._overlay = overlay
        try:
            applied = self._replay(records)
            for row_key, value in overlay.items():
                if value is None:
                    batch.delete(row_key)
                else:
                    batch.put(row_key, value)
            self._db.write(batch)
        finally:
            self._use_db()
            del self._overlay
        return applied

    def approximate_num_entries(self) -> int:
        """RocksDB's key estimate: latest values plus segment rows (not versions)."""
        self._check_open()
        return self._rocksdb_int("rocksdb.estimate-num-keys")


class InMemoryVersionedKeyValueStore(InMemoryStore, _VersionedBase):
    """Non-persistent versioned store: per key sorted lists of valid_from and values.

    Expiry follows the RocksDB store exactly (a non-newest version goes when the segment of
    its valid_to dies), so both answer every query the same way.
    """

    store_type: ClassVar[StoreType] = StoreType.VERSIONED

    def __init__(
        self,
        history_retention: int | Any,
        name: str = "in-memory-versioned",
        *,
        segment_interval: int | Any | None = None,
        key_serde: object = "bytes",
        value_serde: object = "bytes",
    ) -> None:
        hr_ms = _history_retention(history_retention)
        interval_ms = _segment_interval(segment_interval, hr_ms)
        super().__init__(name, key_serde=key_serde, value_serde=value_serde)
        self.history_retention_ms = hr_ms
        self._init_segments(hr_ms, interval_ms)
        self._versions: dict[bytes, tuple[list[int], list[bytes | None]]] = {}

    def _expire(self, min_live: int) -> None:
        """Forget versions whose valid_to segment is dead (never the newest)."""
        cutoff = min_live * self.segment_interval_ms  # valid_to below this: dead segment
        for key in list(self._versions):
            froms, values = self._versions[key]
            # version i (not newest) is dead when froms[i + 1] < cutoff
            dead = bisect.bisect_left(froms, cutoff, 1) - 1
            if dead > 0:
                del froms[:dead]
                del values[:dead]
            if len(froms) == 1 and values[0] is None and froms[0] < cutoff:
                del self._versions[key]  # a lone newest tombstone in a dead segment

    def _do_put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        entry = self._versions.get(key)
        if entry is None:
            self._versions[key] = ([timestamp], [value])
            return VALID_TO_UNDEFINED
        froms, values = entry
        index = bisect.bisect_left(froms, timestamp)
        if index < len(froms) and froms[index] == timestamp:
            values[index] = value
        else:
            froms.insert(index, timestamp)
            values.insert(index, value)
        return froms[index + 1] if index + 1 < len(froms) else VALID_TO_UNDEFINED

    def _retained_from(self, froms: list[int]) -> int:
        """Index of the oldest version still retained (its valid_to segment is live)."""
        cutoff = self._min_live * self.segment_interval_ms
        return max(bisect.bisect_left(froms, cutoff, 1) - 1, 0)

    def get(self, key: bytes, as_of: int | None = None) -> VersionedRecord | None:
        _check_key(key)
        _check_time(as_of, "as_of")
        self._check_open()
        entry = self._versions.get(key)
        if entry is None:
            return None
        froms, values = entry
        newest_value = values[-1]
        if as_of is None:
            return None if newest_value is None else VersionedRecord(newest_value, froms[-1], None)
        if froms[-1] <= as_of:
            return None if newest_value is None else VersionedRecord(newest_value, froms[-1], None)
        if as_of < self._observed - self.history_retention_ms:
            return None
        index = bisect.bisect_right(froms, as_of) - 1
        if index < self._retained_from(froms) or values[index] is None:
            return None
        return VersionedRecord(values[index], froms[index], froms[index + 1])  # type: ignore[arg-type]

    def get_versions(
        self, key: bytes, from_time: int | None = None, to_time: int | None = None, ascending: bool = False
    ) -> list[VersionedRecord]:
        lo, hi = self._version_range(key, from_time, to_time)
        entry = self._versions.get(key)
        if entry is None or lo > hi:
            return []
        froms, values = entry
        last = len(froms) - 1
        result = []
        first = last if hi < self._observed - self.history_retention_ms else self._retained_from(froms)
        for index in range(first, last + 1):
            value = values[index]
            valid_from = froms[index]
            if value is None or valid_from > hi:
                continue
            valid_to = froms[index + 1] if index < last else None
            if valid_to is None or valid_to > lo:
                result.append(VersionedRecord(value, valid_from, valid_to))
        if not ascending:
            result.reverse()
        return result

    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int:
        self._check_open()
        return self._replay(records)

    def _live_segment_ids(self) -> list[int]:
        """Segments the RocksDB store would hold rows in for the current versions."""
        interval = self.segment_interval_ms
        ids = set()
        for froms, values in self._versions.values():
            for index in range(len(froms) - 1):
                ids.add(froms[index + 1] // interval)
            if values[-1] is None:
                ids.add(froms[-1] // interval)
        return sorted(ids)

    def stats(self) -> StoreStats:
        return self._segment_stats(None, sum(len(f) for f, _ in self._versions.values()), 0)

    def close(self) -> None:
        self._versions.clear()
        super().close()
