"""The C loop of the batch decoder (streams/kafka/_native_batch_decoding.c) against the Python
loop on damaged batches; tests/unit/streams/kafka/test_batch_decoding.py runs every other case
with both loops against kafka-python's own decoding."""

from __future__ import annotations

import gc
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.consumer.fetcher import ConsumerRecord, Fetcher
from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBase, DefaultRecordBatch

from airflow_stateful_provider.streams.kafka import batch_decoding
from tests.unit.streams.kafka.test_batch_decoding import batch, varied_records


def test_the_c_loop_is_built():
    assert batch_decoding.NATIVE is not None, "the C loop was not built: see the install's output (pip install -e .)"


def test_records_of_the_c_loop_are_left_alone_by_the_garbage_collector():
    """A record holds only strings, numbers, bytes, None and tuples of them: never in a cycle,
    so untracked from the start, its headers too; the Python loop's are untracked at the
    collector's first pass."""
    parsed = DefaultRecordBatch(batch(varied_records(20)))
    records, _ = batch_decoding.decode_batch(parsed, "changelog", 3, 5)
    assert any(r.headers for r in records) and any(r.headers == () for r in records)
    assert not any(gc.is_tracked(r) or gc.is_tracked(r.headers) for r in records)
    assert all(type(r.headers) is tuple and all(type(h) is tuple for h in r.headers) for r in records)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 1 << 16), count=st.integers(1, 30), damage=st.lists(
    st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=3), cut=st.integers(0, 3))
def test_the_c_loop_decodes_as_the_python_loop_or_leaves_the_batch_to_it(seed, count, damage, cut):
    """Damaged record bytes (the batch header intact, CRCs unchecked): the C loop returns the
    Python loop's records, or None where the Python loop refuses the batch or any doubt remains;
    it never returns records the Python loop would not."""
    data = bytearray(batch(varied_records(count, seed=seed)))
    header = DefaultRecordBase.HEADER_STRUCT.size
    for at, byte in damage:
        data[header + at % (len(data) - header)] = byte
    if cut:
        del data[len(data) - cut:]
    parsed = DefaultRecordBatch(bytes(data))
    try:
        expected = batch_decoding.decode_batch_in_python(parsed, "changelog", 3, 5)
    except CorruptRecordError:
        expected = None
    header_data = parsed._header_data
    native = batch_decoding.NATIVE.decode_records(
        parsed._buffer, parsed._pos, header_data[12], "changelog", 3, 5, header_data[0], header_data[7],
        header_data[8], 0, ConsumerRecord)
    if native is not None:
        assert native == expected
    if not damage and not cut:
        assert native is not None and native == expected


def test_a_process_without_the_c_loop_says_so_once(monkeypatch, caplog):
    monkeypatch.setattr(batch_decoding, "NATIVE", None)
    monkeypatch.setattr(batch_decoding, "_said_python", False)
    caplog.set_level("WARNING", logger=batch_decoding.__name__)
    for _ in range(2):
        assert batch_decoding.decode_batches_at_once(SimpleNamespace(_fetcher=SimpleNamespace(
            PartitionRecords=Fetcher.PartitionRecords)))
    said = [r.getMessage() for r in caplog.records if "decoded in Python" in r.getMessage()]
    assert len(said) == 1 and "C loop" in said[0] and "twice as long" in said[0], said


def test_a_process_with_the_c_loop_says_nothing(caplog):
    caplog.set_level("WARNING", logger=batch_decoding.__name__)
    assert batch_decoding.decode_batches_at_once(SimpleNamespace(_fetcher=SimpleNamespace(
        PartitionRecords=Fetcher.PartitionRecords)))
    assert not [r for r in caplog.records if "decoded in Python" in r.getMessage()]
