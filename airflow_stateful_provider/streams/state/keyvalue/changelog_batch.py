"""A key-value store's changelog records into one RocksDB write batch: the inner loop of its
restoration and of its standby's updates.

Why a C loop (_native_changelog_batch.c): in Python each record costs two attribute reads,
three type checks and the put call, about 1 us on the benchmark machine and the largest part
of a restoration after fetching; the C loop does the same in about a third of that, little
more than rocksdict's put itself (docs/benchmarks.md, "State at scale"). Both loops follow one
rule, record for record: a null key is skipped, a null value deletes, anything but a bytes key
and a bytes-or-None value stops the batch with :func:`bad_record` naming it (the caller then
writes nothing). Where the C loop was not built (no compiler at install) the Python loop does
the work; batch_decoding.py says so once in the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.keyvalue.store import bad_record

__all__ = ["NATIVE", "fill_write_batch", "fill_write_batch_in_python"]

NATIVE: ModuleType | None
try:  # the C loop, built at install where a C compiler is
    import airflow_stateful_provider.streams.state.keyvalue._native_changelog_batch as NATIVE
except ImportError:  # not built, or loaded from a zip: the same work in Python
    NATIVE = None


class _NoRecordType(tuple[object, ...]):
    """Given to the C loop for a batch whose first record is no named tuple with ``key`` and
    ``value``: no record is of this type, so every one is read by attribute."""


_field_indexes: dict[type, tuple[type, int, int]] = {}


def _read_by_index(record_type: type) -> tuple[type, int, int]:
    """The C loop reads records of a named tuple type (the restore consumer's ConsumerRecords)
    by index, any other by attribute."""
    found = _field_indexes.get(record_type)
    if found is None:
        # a named tuple's __match_args__ are its fields in order
        fields = getattr(record_type, "__match_args__", ()) if issubclass(record_type, tuple) else ()
        found = (record_type, fields.index("key"), fields.index("value")) \
            if "key" in fields and "value" in fields else (_NoRecordType, 0, 0)
        _field_indexes[record_type] = found
    return found


def fill_write_batch(batch: Any, records: Iterable[ChangelogRecord]) -> int:
    """Put (or delete) every record of ``records`` into ``batch``; returns how many it applied.
    Raises InvalidRecordError naming the first bad record, ``batch`` then not to be written."""
    if NATIVE is None:
        return fill_write_batch_in_python(batch, records)
    listed = records if isinstance(records, (list, tuple)) else list(records)
    if not listed:
        return 0
    applied, bad = NATIVE.fill(listed, batch.put, batch.delete, *_read_by_index(type(listed[0])))
    if bad >= 0:
        raise bad_record(listed[bad])
    return int(applied)


def fill_write_batch_in_python(batch: Any, records: Iterable[ChangelogRecord]) -> int:
    """The same loop in Python."""
    put = batch.put
    delete = batch.delete
    applied = 0
    for record in records:
        key = record.key
        if key is None:
            continue
        value = record.value
        if type(key) is not bytes or (value is not None and type(value) is not bytes):
            raise bad_record(record)
        if value is None:
            delete(key)
        else:
            put(key, value)
        applied += 1
    return applied
