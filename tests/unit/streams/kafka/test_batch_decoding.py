"""The one-pass batch decoder returns exactly what kafka-python's own decoding returns:
same ConsumerRecords, same positions, same skipped batches, same errors on bad data.
kafka-python's stock ``Fetcher.PartitionRecords`` is the oracle for every case, each case run
with the C loop (which this test environment must have built) and with the Python one."""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace

import pytest
from kafka import KafkaConsumer
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer import IsolationLevel
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from kafka.record.default_records import DefaultRecordBase
from kafka.record.util import calc_crc32c
from kafka.structs import TopicPartition

from airflow_stateful_provider.streams.kafka import batch_decoding
from airflow_stateful_provider.streams.kafka.batch_decoding import decode_batches_at_once

TP = TopicPartition("changelog", 3)
FAST = SimpleNamespace(_fetcher=SimpleNamespace(PartitionRecords=Fetcher.PartitionRecords))
assert decode_batches_at_once(FAST)
BatchDecoding = FAST._fetcher.PartitionRecords
CODEC_GZIP, CODEC_ZSTD = DefaultRecordBase.CODEC_GZIP, DefaultRecordBase.CODEC_ZSTD


@pytest.fixture(autouse=True, params=["C loop", "Python loop"])
def decoder(request, monkeypatch):
    """Every test with each loop; ``make test`` builds the C one (pip install -e .)."""
    if request.param == "C loop":
        assert batch_decoding.NATIVE is not None, "the C loop was not built: see the install's output"
    else:
        monkeypatch.setattr(batch_decoding, "NATIVE", None)
    return request.param


def batch(records, *, offset=0, compression=0, producer_id=-1, transactional=False, magic=2) -> bytes:
    builder = MemoryRecordsBuilder(magic, compression, batch_size=1 << 30, offset=offset,
                                   transactional=transactional, producer_id=producer_id,
                                   producer_epoch=0 if producer_id != -1 else -1,
                                   base_sequence=0 if producer_id != -1 else -1)
    for timestamp, key, value, headers in records:
        assert builder.append(timestamp, key, value, headers) is not None
    builder.close()
    return bytes(builder.buffer())


def with_attributes(data: bytes, set_bits: int) -> bytes:
    """A batch with attribute bits set (what only a broker writes: log-append time, control)."""
    buffer = bytearray(data)
    at = DefaultRecordBase.ATTRIBUTES_OFFSET
    struct.pack_into(">h", buffer, at, struct.unpack_from(">h", buffer, at)[0] | set_bits)
    struct.pack_into(">I", buffer, DefaultRecordBase.CRC_OFFSET, calc_crc32c(memoryview(buffer)[at:]))
    return bytes(buffer)


def read(partition_records_class, data: bytes, *, fetch_offset=0, take=None, **kwargs):
    """All records taken ``take`` at a time, and the position after each take."""
    part = partition_records_class(fetch_offset, TP, MemoryRecords(data), **kwargs)
    taken, positions = [], []
    while part:
        chunk = part.take(take)
        taken.extend(chunk)
        positions.append(part.next_fetch_offset)
        if not chunk and part:
            part.drain()
    return taken, positions, (part.records_read, part.bytes_read)


def assert_same(data: bytes, **kwargs) -> list:
    stock = read(Fetcher.PartitionRecords, data, **kwargs)
    fast = read(BatchDecoding, data, **kwargs)
    ours = MemoryRecords(data).next_batch().magic == 2 and "key_deserializer" not in kwargs
    if ours:  # headers are a tuple here, kafka-python's a list
        assert all(type(record.headers) is tuple for record in fast[0])
        stock = ([r._replace(headers=tuple(r.headers)) for r in stock[0]], *stock[1:])
    assert fast == stock
    assert all(type(record) is type(expected) for record, expected in zip(fast[0], stock[0], strict=True))
    return fast[0]


def varied_records(count: int, seed: int = 7):
    """Keys, values and timestamps whose varints take one, two and three bytes; nulls; headers."""
    rng = random.Random(seed)
    out, timestamp = [], 1_700_000_000_000
    for i in range(count):
        timestamp += rng.choice([0, 1, 63, 64, 5000, 90_000, -2])
        key = None if i % 11 == 5 else bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 63, 64, 200])))
        value = None if i % 7 == 3 else b"v" * rng.choice([0, 5, 63, 64, 8191, 8192, 20_000])
        headers = [] if i % 5 else [("h", b"x"), ("empty", b""), ("none", None), ("ü", b"\xff" * 70)]
        out.append((timestamp, key, value, headers))
    return out


@pytest.mark.parametrize("compression", [0, CODEC_GZIP, CODEC_ZSTD])
def test_records_match_kafka_pythons_field_for_field(compression):
    data = batch(varied_records(300), offset=10, compression=compression) \
        + batch(varied_records(50, seed=8), offset=310, compression=compression)
    records = assert_same(data, fetch_offset=10)
    assert [r.offset for r in records] == list(range(10, 360))
    assert any(r.key is None for r in records) and any(r.value is None for r in records)
    assert any(r.headers for r in records) and any(r.serialized_header_size == -1 for r in records)


def test_offset_deltas_past_two_varint_bytes():
    records = assert_same(batch([(1000 + i, b"k%d" % i, b"v", []) for i in range(9000)]))
    assert records[-1].offset == 8999 and records[-1].timestamp == 9999


@pytest.mark.parametrize("take", [1, 7, 100])
def test_positions_when_a_poll_stops_mid_batch(take):
    data = batch(varied_records(40), offset=100) + batch(varied_records(30, seed=9), offset=140)
    assert_same(data, fetch_offset=100, take=take)


def test_a_fetch_starting_inside_a_batch_skips_the_records_before_it():
    records = assert_same(batch(varied_records(20), offset=50), fetch_offset=57)
    assert records[0].offset == 57


def test_log_append_time_batches_carry_the_batchs_timestamp():
    records = assert_same(with_attributes(batch(varied_records(10)), DefaultRecordBase.TIMESTAMP_TYPE_MASK))
    assert {r.timestamp_type for r in records} == {1} and len({r.timestamp for r in records}) == 1


def test_control_batches_are_skipped_and_aborted_transactions_dropped_under_read_committed():
    committed = batch([(1, b"a", b"1", [])], offset=0, producer_id=41, transactional=True)
    marker = with_attributes(batch([(2, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])], offset=1,
                                   producer_id=41, transactional=True), DefaultRecordBase.CONTROL_MASK)
    aborted = batch([(3, b"b", b"2", []), (4, b"c", b"3", [])], offset=2, producer_id=42, transactional=True)
    abort_marker = with_attributes(batch([(5, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [])], offset=4,
                                         producer_id=42, transactional=True), DefaultRecordBase.CONTROL_MASK)
    plain = batch([(6, b"d", b"4", [])], offset=5)
    data = committed + marker + aborted + abort_marker + plain
    aborts = [SimpleNamespace(producer_id=42, first_offset=2)]
    records = assert_same(data, isolation_level=IsolationLevel.READ_COMMITTED, aborted_transactions=aborts)
    assert [r.value for r in records] == [b"1", b"4"]
    records = assert_same(data)  # read uncommitted: the aborted records too, never the markers
    assert [r.value for r in records] == [b"1", b"2", b"3", b"4"]


def test_old_message_formats_are_decoded_as_kafka_python_does():
    records = assert_same(batch([(1000, b"k", b"v", []), (1001, None, b"w", [])], magic=1))
    assert [r.value for r in records] == [b"v", b"w"]


def test_a_batch_failing_its_crc_is_refused():
    data = bytearray(batch(varied_records(5)))
    data[-3] ^= 0xFF
    for cls in (Fetcher.PartitionRecords, BatchDecoding):
        with pytest.raises(CorruptRecordError, match="failed crc check"):
            read(cls, bytes(data))


@pytest.mark.parametrize("damage", ["cut", "length"])
def test_a_malformed_batch_is_refused_naming_where(damage):
    data = bytearray(batch([(1, b"key", b"value", [])] * 3, offset=70))
    if damage == "cut":  # the last record loses its last bytes; the batch length says so too
        del data[-4:]
        struct.pack_into(">i", data, 8, len(data) - DefaultRecordBase.AFTER_LEN_OFFSET)
    else:  # the second record's length is one byte short
        first = DefaultRecordBase.HEADER_STRUCT.size
        data[first + data[first] // 2 + 1] -= 2
    for cls in (Fetcher.PartitionRecords, BatchDecoding):
        with pytest.raises(CorruptRecordError):
            read(cls, bytes(data), check_crcs=False)
    with pytest.raises(CorruptRecordError, match=r"changelog-3 at offset 7[0-2]"):
        read(BatchDecoding, bytes(data), check_crcs=False)


def test_consumers_with_deserializers_keep_kafka_pythons_decoding():
    data = batch(varied_records(10))
    deserializer = SimpleNamespace(deserialize=lambda topic, headers, raw: None if raw is None else raw[::-1])
    assert_same(data, key_deserializer=deserializer, value_deserializer=deserializer)


def test_installs_once_and_leaves_other_layouts_alone():
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(4, 0))
    try:
        assert decode_batches_at_once(consumer)
        installed = consumer._fetcher.PartitionRecords
        assert installed is BatchDecoding and decode_batches_at_once(consumer)
        assert consumer._fetcher.PartitionRecords is installed
    finally:
        consumer.close()
    assert not decode_batches_at_once(SimpleNamespace())
    assert not decode_batches_at_once(SimpleNamespace(_fetcher=SimpleNamespace(PartitionRecords=object)))

