"""append_to_batch leaves a kafka-python record batch as kafka-python's own append would:
the same bytes once built, the same records in each batch, the same offsets."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecordsBuilder

from airflow_stateful_provider.streams.kafka.batch_encoding import append_to_batch

T0 = 1_700_000_000_000


def stock_batches(records, batch_size):
    """kafka-python's append, a new batch whenever one is full."""
    built, builder = [], MemoryRecordsBuilder(2, 0, batch_size)
    for key, value, timestamp in records:
        if builder.append(timestamp, key, value, []) is None:
            builder.close()
            built.append(bytes(builder.buffer()))
            builder = MemoryRecordsBuilder(2, 0, batch_size)
            assert builder.append(timestamp, key, value, []) is not None
    builder.close()
    return [*built, bytes(builder.buffer())]


def appended_batches(records, batch_size, run=None):
    """append_to_batch over runs of ``run`` records (all at once when None)."""
    built, builder, i = [], MemoryRecordsBuilder(2, 0, batch_size), 0
    while i < len(records):
        appended, _ = append_to_batch(builder, records, i, min(len(records), i + (run or len(records))))
        if appended:
            i += appended
            continue
        builder.close()
        built.append(bytes(builder.buffer()))
        builder = MemoryRecordsBuilder(2, 0, batch_size)
    builder.close()
    return [*built, bytes(builder.buffer())]


def mixed_records(count):
    """Null keys and values, values past the varint table (16 KiB), timestamps going back
    (a negative delta) and far ahead."""
    records = []
    for i in range(count):
        key = None if i % 11 == 5 else b"key-%d" % i
        value = None if i % 13 == 7 else (b"v" * 20_000 if i % 97 == 3 else b"value-%d" % i * (i % 9))
        timestamp = T0 + i * 10 if i % 17 else T0 - 5_000 + i
        if i % 50 == 49:
            timestamp = T0 + (1 << 40)
        records.append((key, value, timestamp))
    return records


@pytest.mark.parametrize("batch_size", [512, 16_384, 1 << 20])
@pytest.mark.parametrize("run", [None, 1, 7])
def test_the_batches_are_the_bytes_kafka_python_builds(batch_size, run):
    records = mixed_records(3_000)
    assert appended_batches(records, batch_size, run) == stock_batches(records, batch_size)


def test_offsets_past_the_varint_table_and_the_builders_state():
    records = [(b"k%d" % i, b"v", T0 + i) for i in range(20_000)]  # offsets up to 19,999
    builder = MemoryRecordsBuilder(2, 0, 1 << 22)
    assert append_to_batch(builder, records, 0, len(records))[0] == len(records)
    assert builder.next_offset() == len(records)
    builder.close()
    assert bytes(builder.buffer()) == stock_batches(records, 1 << 22)[0]
    batch = DefaultRecordBatch(bytes(builder.buffer()))
    decoded = list(batch)
    assert [r.offset for r in decoded] == list(range(20_000)) and decoded[-1].key == b"k19999"
    assert batch.max_timestamp == T0 + 19_999


def test_the_largest_record_size_is_the_one_kafka_python_reports():
    records = [(b"a", b"x" * 10, T0), (b"b", b"x" * 300, T0 + 1), (None, None, T0 + 2)]
    builder = MemoryRecordsBuilder(2, 0, 1 << 20)
    stock = MemoryRecordsBuilder(2, 0, 1 << 20)
    sizes = [stock.append(t, k, v, []).size for k, v, t in records]
    assert append_to_batch(builder, records, 0, 3) == (3, max(sizes))


def test_a_record_of_another_shape_is_left_to_kafka_pythons_append():
    records = [(b"a", b"1", T0), (b"b", bytearray(b"2"), T0 + 1), (b"c", b"3", T0 + 2), ("d", b"4", T0 + 3),
               (b"e", b"5", None)]
    builder = MemoryRecordsBuilder(2, 0, 1 << 20)
    assert append_to_batch(builder, records, 0, 5) == (1, 9)
    assert append_to_batch(builder, records, 1, 5) == (0, 0)  # a bytearray value
    assert append_to_batch(builder, records, 2, 5)[0] == 1  # stops at a str key
    assert append_to_batch(builder, records, 4, 5) == (0, 0)  # no timestamp


def test_closed_batches_and_old_message_formats_take_nothing():
    records = [(b"a", b"1", T0)]
    closed = MemoryRecordsBuilder(2, 0, 1 << 20)
    closed.close()
    assert append_to_batch(closed, records, 0, 1) == (0, 0)
    assert append_to_batch(MemoryRecordsBuilder(1, 0, 1 << 20), records, 0, 1) == (0, 0)
    assert append_to_batch(MemoryRecordsBuilder(2, 0, 1 << 20), records, 1, 1) == (0, 0)
