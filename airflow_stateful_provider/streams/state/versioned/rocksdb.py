"""The versioned key-value store on RocksDB: the newest versions in a latest value store,
older ones in time segments that expire whole (docs/semantics.md §5).

RocksDB layout, one RocksDB per store, three key spaces told apart by the first byte::

    0x00 "observed_stream_time"          -> 8 bytes BE
    0x01 | key                           -> latest value store: valid_from (8 bytes BE) | value
    0x02 | segment id (8 bytes BE) | key -> segment row (see format.py)

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
from collections.abc import Iterable
from typing import Any, ClassVar

import rocksdict

from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.serdes import serde_name
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.metadata import StoreMetadata
from airflow_stateful_provider.streams.state.common.rocks import restores_directly
from airflow_stateful_provider.streams.state.common.rocksdb_memory import RocksDBMemory
from airflow_stateful_provider.streams.state.common.segments import SEGMENT_PREFIX, SegmentedRocksDBStore
from airflow_stateful_provider.streams.state.versioned.format import (
    ENTRY,
    HEADER,
    decode_row,
    encode_row,
    find_in_row,
)
from airflow_stateful_provider.streams.state.versioned.store import (
    METADATA,
    VALID_TO_UNDEFINED,
    VersionedRecord,
    VersionedStoreBase,
    check_key,
    check_time,
    history_retention_ms,
    segment_interval_ms,
)

__all__ = ["RocksDBVersionedKeyValueStore"]

_I64 = struct.Struct(">q")
_SEGP = struct.Struct(">Bq")  # segment marker, segment id (segment_prefix in one pack)
_LATEST = b"\x01"
_SEG_MARK = SEGMENT_PREFIX[0]
_HDR_SIZE = HEADER.size


class RocksDBVersionedKeyValueStore(SegmentedRocksDBStore, VersionedStoreBase):
    """Persistent versioned store: latest value store plus valid_to segments in one RocksDB."""

    store_type: ClassVar[str] = METADATA.store_type
    reads_while_restoring: ClassVar[bool] = True  # the replay reads the rows a put replaces

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
        transactional: bool = False,
        rocksdb_memory: RocksDBMemory | None = None,
    ) -> None:
        path = os.fspath(path)
        settings: dict[str, int] = {}  # none given: the stored ones
        if history_retention is not None:
            hr_ms = history_retention_ms(history_retention)
            settings = {"history_retention_ms": hr_ms,
                        "segment_interval_ms": segment_interval_ms(segment_interval, hr_ms)}
        elif segment_interval is not None:
            raise ConfigError("segment_interval given without history_retention")
        elif not os.path.isdir(path):
            raise ConfigError(f"creating versioned store {path} needs a history retention")
        requested = StoreMetadata(
            store_type=self.store_type,
            name=name or os.path.basename(os.path.abspath(path)),
            key_serde=serde_name(key_serde),
            value_serde=serde_name(value_serde),
            settings=settings,
        )
        super().__init__(path, requested, read_only=read_only, transactional=transactional,
                         rocksdb_memory=rocksdb_memory)
        self._use_db()
        self._open_segments("history_retention_ms")
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

    def _write_row(self, row_key: bytes, segment_id: int, next_ts: int, froms: list[int],
                   values: list[bytes | None]) -> None:
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

    def get(self, key: bytes, as_of: int | None = None) -> VersionedRecord[bytes] | None:
        """Newest non-tombstone version (``as_of`` None), or the version valid at ``as_of``."""
        if type(key) is not bytes:
            check_key(key)
        if as_of is not None and type(as_of) is not int:
            check_time(as_of, "as_of")
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
    ) -> list[VersionedRecord[bytes]]:
        """Non-tombstone versions valid at some point in ``[from_time, to_time]``
        (valid_from <= to_time and valid_to > from_time), newest first unless ``ascending``."""
        lo, hi = self._version_range(key, from_time, to_time)
        result: list[VersionedRecord[bytes]] = []
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

    @restores_directly
    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int:
        """Replay changelog records, applying the retention cut-off markers among them where
        they stand (common/cutoff.py). Returns how many records were applied."""
        self._check_writable()
        return self._restore_runs(records, self._restore_run)

    def _restore_run(self, records: Iterable[ChangelogRecord]) -> int:
        """Replay changelog records (key, value or None, timestamp = valid_from) as puts,
        buffered and written in one RocksDB write batch. Returns how many were applied
        (records beyond history retention at their turn are skipped, as the original put
        skipped them)."""
        self._check_writable()
        overlay: dict[bytes, bytes | None] = {}
        db_get = self._db.get

        def get(row_key: bytes) -> bytes | None:
            if row_key in overlay:
                return overlay[row_key]
            stored: bytes | None = db_get(row_key)
            return stored

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
