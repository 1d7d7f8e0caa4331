"""Decode each fetched record batch in one pass (kafka-python 3.0.12 consumers).

kafka-python decodes a fetched v2 record batch record by record: for each one it builds a
``DefaultRecord`` through seven ``decode_varint`` calls and a dozen property reads, then
copies it into a ``ConsumerRecord``. That is about 3.5 us a record, most of a restoring
thread's time and a good part of a processing one's (docs/benchmarks.md).

:func:`decode_batches_at_once` gives a consumer a fetcher that reads a whole batch in one
loop straight into ``ConsumerRecord`` tuples: a C loop (_native_batch_decoding.c, about
0.3 us a record) where it was built at install, else the same loop in Python (about 2 us),
with the one- and two-byte varints (nearly all of them) read inline. The records are the
same, field for field (tests/unit/streams/kafka/test_batch_decoding.py compares both loops
with kafka-python's own decoding), but for their headers: a tuple, not a list (the engine
never changes them, and a record of strings, numbers and tuples is one the garbage collector
can leave alone: see the C loop); so are the CRC checks, transaction handling, control
batches and consumer positions. Only the per-record work differs, and a malformed batch is
refused whole, naming the partition and offset, where kafka-python first returns the
records before the bad one.

Consumers with deserializers, batches of the old message formats (v0/v1) and consumers
without this fetcher layout (other kafka-python versions) keep kafka-python's decoding.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

__all__ = ["NATIVE", "decode_batches_at_once"]

_LOG_APPEND_TIME = 1
_TIMESTAMP_TYPE_MASK = 0x08

log = logging.getLogger(__name__)

NATIVE: ModuleType | None
try:  # the C loop (_native_batch_decoding.c), built at install where a C compiler is
    import airflow_stateful_provider.streams.kafka._native_batch_decoding as NATIVE
except ImportError:  # not built (no compiler), or loaded from a zip: the same work in Python
    NATIVE = None
_said_python = False


def decode_batches_at_once(consumer: Any) -> bool:
    """Give ``consumer``'s fetcher the one-pass batch decoder; returns whether it applies.

    Checked against kafka-python 3.0.12: the fetcher (``consumer._fetcher``) builds one
    ``PartitionRecords`` per fetched partition, whose ``_unpack_records`` decodes the
    batches; the fetcher's class attribute is replaced once, so no record pays for a wrapper.
    A fetcher of another layout keeps kafka-python's decoding (False).
    """
    fetcher: Any = getattr(consumer, "_fetcher", None)
    stock = getattr(fetcher, "PartitionRecords", None)
    if stock is None or not hasattr(stock, "_unpack_records") or not hasattr(stock, "_is_batch_aborted"):
        return False
    if not getattr(stock, "decodes_batches_at_once", False):
        fetcher.PartitionRecords = _batch_decoding_partition_records(stock)
    _say_once_if_in_python()
    return True


def _say_once_if_in_python() -> None:
    """A process without the C loops says so once (both are built, or neither): its restores take
    about twice as long."""
    global _said_python
    if NATIVE is None and not _said_python:
        _said_python = True
        log.warning("record batches are decoded in Python: the C loops of airflow-stateful-provider were not "
                    "built when it was installed (no C compiler or Python headers?), so restoring state takes "
                    "about twice as long; reinstall with gcc and python3-dev present (docs/getting-started.md)")


_classes: dict[type, type] = {}


def _batch_decoding_partition_records(stock: type) -> type:
    """A subclass of kafka-python 3.0.12's ``Fetcher.PartitionRecords`` (made once per base)
    whose ``_unpack_records`` decodes with :func:`_unpack` when there are no deserializers."""
    if stock in _classes:
        return _classes[stock]

    class BatchDecodingPartitionRecords(stock):
        decodes_batches_at_once = True

        def _unpack_records(self, tp: Any, records: Any, key_deserializer: Any,
                            value_deserializer: Any) -> Iterator[Any]:
            if key_deserializer is not None or value_deserializer is not None:
                yield from super()._unpack_records(tp, records, key_deserializer, value_deserializer)
                return
            yield from _unpack(self, tp, records)

    _classes[stock] = BatchDecodingPartitionRecords
    return BatchDecodingPartitionRecords


def _unpack(part: Any, tp: Any, records: Any) -> Iterator[Any]:
    """kafka-python 3.0.12's ``PartitionRecords._unpack_records`` without deserializers: same
    batch checks, aborted-transaction handling (its ``_consume_aborted_transactions_up_to``,
    ``_contains_abort_marker``, ``_is_batch_aborted``) and offsets, records decoded by
    :func:`decode_batch`."""
    from kafka import IsolationLevel
    from kafka.consumer.fetcher import ConsumerRecord
    from kafka.errors import CorruptRecordError

    batch = records.next_batch()
    last_batch = None
    while batch is not None:
        last_batch = batch
        if part.check_crcs and not batch.validate_crc():
            raise CorruptRecordError(f"Record batch for partition {tp} at offset {batch.base_offset} "
                                     f"failed crc check")
        if batch.magic != 2:
            yield from _legacy_batch(part, tp, batch, ConsumerRecord)
            batch = records.next_batch()
            continue
        part.leader_epoch = batch.leader_epoch
        if part.isolation_level == IsolationLevel.READ_COMMITTED and batch.has_producer_id():
            part._consume_aborted_transactions_up_to(batch.last_offset)
            if part._contains_abort_marker(batch):
                part.aborted_producer_ids.discard(batch.producer_id)
            elif part._is_batch_aborted(batch):
                part.next_fetch_offset = batch.next_offset
                batch = records.next_batch()
                continue
        if batch.is_control_batch:  # transaction markers are not returned to the consumer
            part.next_fetch_offset = batch.next_offset
            batch = records.next_batch()
            continue
        decoded, size = decode_batch(batch, tp.topic, tp.partition, part.leader_epoch)
        part.records_read += len(decoded)
        part.bytes_read += size
        for record in decoded:
            part.next_fetch_offset = record.offset + 1
            yield record
        batch = records.next_batch()
    # v2 keeps a batch's last offset even when compaction removed its last records: the next
    # fetch starts after the batch, not inside it (where it would fetch the batch again).
    if last_batch is not None and last_batch.magic == 2:
        part.next_fetch_offset = last_batch.next_offset
    part.drain()


def _legacy_batch(part: Any, tp: Any, batch: Any, record_type: type) -> Iterator[Any]:
    """Message formats v0/v1 (brokers before Kafka 4.0), record by record as kafka-python does."""
    from kafka.errors import CorruptRecordError

    for record in batch:
        if part.check_crcs and not record.validate_crc():
            raise CorruptRecordError(f"Record for partition {tp} at offset {record.offset} failed crc check")
        part.records_read += 1
        part.bytes_read += record.size_in_bytes
        part.next_fetch_offset = record.offset + 1
        key, value, headers = record.key, record.value, record.headers
        yield record_type(tp.topic, tp.partition, part.leader_epoch, record.offset, record.timestamp,
                          record.timestamp_type, key, value, headers, record.checksum,
                          -1 if key is None else len(key), -1 if value is None else len(value),
                          _header_size(headers))


def decode_batch(batch: Any, topic: str, partition: int, leader_epoch: int) -> tuple[list[Any], int]:
    """All records of a v2 ``DefaultRecordBatch`` as ConsumerRecords, and the sum of their
    lengths (what kafka-python counts as bytes read): by the C loop when it is built and the
    batch well-formed, else by :func:`decode_batch_in_python`, which also names any fault.
    Checked against kafka-python 3.0.12: the batch fields read are those the Python loop reads."""
    from kafka.consumer.fetcher import ConsumerRecord

    if NATIVE is not None:
        batch._maybe_uncompress()
        header = batch._header_data
        decoded = NATIVE.decode_records(
            batch._buffer, batch._pos, header[12], topic, partition, leader_epoch, header[0], header[7], header[8],
            1 if header[5] & _TIMESTAMP_TYPE_MASK else 0, ConsumerRecord)
        if decoded is not None:
            return decoded
    return decode_batch_in_python(batch, topic, partition, leader_epoch)


def decode_batch_in_python(batch: Any, topic: str, partition: int, leader_epoch: int) -> tuple[list[Any], int]:
    """:func:`decode_batch` in Python. Checked against kafka-python 3.0.12:
    reads the batch's decompressed buffer, position and header fields (``_maybe_uncompress``,
    ``_buffer``, ``_pos``, ``_header_data``) and builds its ``ConsumerRecord`` tuples.

    Record => Length Attributes TimestampDelta OffsetDelta Key Value Headers, every integer
    a zigzag varint; a varint below 0x80 is one byte, whose value is ``b >> 1 ^ -(b & 1)``.
    """
    from kafka.consumer.fetcher import ConsumerRecord
    from kafka.errors import CorruptRecordError
    from kafka.record.util import decode_varint

    batch._maybe_uncompress()
    buffer = bytes(batch._buffer)  # slices of bytes are bytes: one copy per key and value
    pos = batch._pos
    size = 0
    header = batch._header_data
    base_offset, attributes, first_timestamp, max_timestamp, count = (
        header[0], header[5], header[7], header[8], header[12])
    timestamp_type = 1 if attributes & _TIMESTAMP_TYPE_MASK else 0
    log_append_time = timestamp_type == _LOG_APPEND_TIME
    new = tuple.__new__
    out: list[Any] = []
    append = out.append
    try:
        for _ in range(count):
            # Each varint: one byte (b < 0x80), two bytes (c < 0x80), or decode_varint.
            b = buffer[pos]
            if b < 0x80:
                length, pos = b >> 1 ^ -(b & 1), pos + 1
            elif (c := buffer[pos + 1]) < 0x80:
                u = b & 0x7F | c << 7
                length, pos = u >> 1 ^ -(u & 1), pos + 2
            else:
                length, pos = decode_varint(buffer, pos)
            record_start = pos
            size += length
            b = buffer[pos]  # attributes: unused
            pos = pos + 1 if b < 0x80 else decode_varint(buffer, pos)[1]
            b = buffer[pos]
            if b < 0x80:
                timestamp_delta, pos = b >> 1 ^ -(b & 1), pos + 1
            elif (c := buffer[pos + 1]) < 0x80:
                u = b & 0x7F | c << 7
                timestamp_delta, pos = u >> 1 ^ -(u & 1), pos + 2
            else:
                timestamp_delta, pos = decode_varint(buffer, pos)
            b = buffer[pos]
            if b < 0x80:
                offset_delta, pos = b >> 1 ^ -(b & 1), pos + 1
            elif (c := buffer[pos + 1]) < 0x80:
                u = b & 0x7F | c << 7
                offset_delta, pos = u >> 1 ^ -(u & 1), pos + 2
            else:
                offset_delta, pos = decode_varint(buffer, pos)
            b = buffer[pos]
            if b < 0x80:
                key_size, pos = b >> 1 ^ -(b & 1), pos + 1
            elif (c := buffer[pos + 1]) < 0x80:
                u = b & 0x7F | c << 7
                key_size, pos = u >> 1 ^ -(u & 1), pos + 2
            else:
                key_size, pos = decode_varint(buffer, pos)
            if key_size >= 0:
                key = buffer[pos:pos + key_size]
                pos += key_size
            else:
                key = None
            b = buffer[pos]
            if b < 0x80:
                value_size, pos = b >> 1 ^ -(b & 1), pos + 1
            elif (c := buffer[pos + 1]) < 0x80:
                u = b & 0x7F | c << 7
                value_size, pos = u >> 1 ^ -(u & 1), pos + 2
            else:
                value_size, pos = decode_varint(buffer, pos)
            if value_size >= 0:
                value = buffer[pos:pos + value_size]
                pos += value_size
            else:
                value = None
            if buffer[pos] == 0:  # no headers
                pos += 1
                headers: tuple[tuple[str, bytes | None], ...] = ()
                header_size = -1
            else:
                headers, pos = _headers(buffer, pos)
                header_size = _header_size(headers)
            if pos - record_start != length:  # a cut-off key or value ends past the buffer: IndexError
                raise CorruptRecordError(
                    f"Invalid record size in {topic}-{partition} at offset {base_offset + offset_delta}: "
                    f"expected {length} bytes, read {pos - record_start}")
            append(new(ConsumerRecord, (
                topic, partition, leader_epoch, base_offset + offset_delta,
                max_timestamp if log_append_time else first_timestamp + timestamp_delta, timestamp_type,
                key, value, headers, None, -1 if key is None else key_size,
                -1 if value is None else value_size, header_size)))
    except (IndexError, ValueError) as exc:
        at = out[-1].offset + 1 if out else base_offset
        raise CorruptRecordError(f"Found invalid record structure in {topic}-{partition} at offset {at} "
                                 f"(batch at offset {base_offset}): {exc!r}") from exc
    if pos != len(buffer):
        raise CorruptRecordError(f"{len(buffer) - pos} unconsumed bytes after all records of the batch at "
                                 f"offset {base_offset} in {topic}-{partition}")
    return out, size


def _headers(buffer: bytes, pos: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    """A record's headers at ``pos`` (a tuple: kafka-python's are a list), with kafka-python
    3.0.12's varint decoder and its errors."""
    from kafka.errors import CorruptRecordError
    from kafka.record.util import decode_varint as _varint

    count, pos = _varint(buffer, pos)
    if count < 0:
        raise CorruptRecordError(f"Found invalid number of record headers {count}")
    headers = []
    for _ in range(count):
        key_size, pos = _varint(buffer, pos)
        if key_size < 0:
            raise CorruptRecordError(f"Invalid negative header key size {key_size}")
        key = buffer[pos:pos + key_size].decode("utf-8")
        pos += key_size
        value_size, pos = _varint(buffer, pos)
        if value_size >= 0:
            value: bytes | None = buffer[pos:pos + value_size]
            pos += value_size
        else:
            value = None
        headers.append((key, value))
    return tuple(headers), pos


def _header_size(headers: Sequence[tuple[str, bytes | None]]) -> int:
    if not headers:
        return -1
    return sum(len(key.encode("utf-8")) + (len(value) if value is not None else 0) for key, value in headers)
