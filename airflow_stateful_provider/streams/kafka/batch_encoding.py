"""Append a run of records into an open kafka-python v2 record batch in one loop.

kafka-python's ``DefaultRecordBatchBuilder.append`` checks each field's type, builds each
record in a ``bytearray`` of its own through four ``encode_varint`` calls and returns a
metadata object: about 3 us a record, a large part of what a record cache flush of
thousands of changelog records costs. :func:`append_to_batch` writes the records straight
into the batch's buffer, the varints of small numbers (nearly all lengths, offset and
timestamp deltas) taken from a table, and leaves the builder as its own ``append`` would
have: the same bytes, offsets, timestamps and record count
(tests/unit/streams/kafka/test_batch_encoding.py compares them with kafka-python's own).

Records of another shape (a key or value that is not ``bytes``, a timestamp that is not an
``int``) and batches of the old message formats are left to kafka-python's ``append``
(which checks and refuses them as before): :func:`append_to_batch` stops before them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["append_to_batch"]

_TABLE_SIZE = 1 << 14


def _varint(value: int) -> bytes:
    """The zigzag varint of ``value`` (any int64), written by kafka-python 3.0.12's own
    ``encode_varint`` (the encoder of its record batches)."""
    from kafka.record.util import encode_varint

    out = bytearray()
    encode_varint(value, out.append)
    return bytes(out)


#: Zigzag varints of 0 .. _TABLE_SIZE - 1.
_SMALL = tuple(_varint(i) for i in range(_TABLE_SIZE))
_NULL = _varint(-1)  # the length of a null key or value
_ATTRIBUTES = b"\x00"
_NO_HEADERS = b"\x00"  # a header count of zero


def append_to_batch(memory_records: Any, records: Sequence[tuple[Any, Any, Any]], start: int,
                    stop: int) -> tuple[int, int]:
    """Append ``records[start:stop]`` ((key, value, timestamp ms), no headers) to
    ``memory_records`` (a kafka-python 3.0.12 ``MemoryRecordsBuilder`` of magic 2) until the
    batch is full or a record of another shape comes (module docstring). Returns how many
    were appended and the largest one's size in the batch (``ProducerBatch.max_record_size``).
    The i-th appended record has offset ``memory_records.next_offset() - appended + i``."""
    if memory_records._closed or memory_records._magic != 2 or start >= stop:
        return 0, 0
    builder = memory_records._builder
    buffer = builder._buffer
    limit = builder._batch_size
    size = len(buffer)
    offset = memory_records._next_offset
    first_timestamp = builder._first_timestamp
    max_timestamp = builder._max_timestamp
    small, table_size, varint, null = _SMALL, _TABLE_SIZE, _varint, _NULL
    largest = 0
    i = start
    # key and value are handled inline, not by a shared helper: a call per field would cost
    # about as much as the rest of the record
    while i < stop:
        key, value, timestamp = records[i]
        if type(timestamp) is not int:
            break
        if key is None:
            key_length, key_prefix, key = 0, null, b""
        elif type(key) is bytes:
            key_length = len(key)
            key_prefix = small[key_length] if key_length < table_size else varint(key_length)
        else:
            break
        if value is None:
            value_length, value_prefix, value = 0, null, b""
        elif type(value) is bytes:
            value_length = len(value)
            value_prefix = small[value_length] if value_length < table_size else varint(value_length)
        else:
            break
        if first_timestamp is None:  # the batch's first record: it always fits
            first_timestamp = max_timestamp = timestamp
            builder._first_timestamp = timestamp
            first = True
        else:
            first = False
        delta = timestamp - first_timestamp
        delta_bytes = small[delta] if 0 <= delta < table_size else varint(delta)
        offset_bytes = small[offset] if offset < table_size else varint(offset)
        body = (2 + len(delta_bytes) + len(offset_bytes) + len(key_prefix) + key_length
                + len(value_prefix) + value_length)
        body_prefix = small[body] if body < table_size else varint(body)
        record_size = body + len(body_prefix)
        if size + record_size > limit and not first:
            break
        buffer += b"".join((body_prefix, _ATTRIBUTES, delta_bytes, offset_bytes, key_prefix, key,
                            value_prefix, value, _NO_HEADERS))
        size += record_size
        if record_size > largest:
            largest = record_size
        if timestamp > max_timestamp:
            max_timestamp = timestamp
        offset += 1
        i += 1
    appended = i - start
    if appended:
        builder._max_timestamp = max_timestamp
        builder._num_records += appended
        builder._last_offset = offset - 1
        memory_records._next_offset = offset
    return appended, largest
