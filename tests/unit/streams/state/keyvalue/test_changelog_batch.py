"""A key-value store's changelog records into a RocksDB write batch (state/keyvalue/changelog_batch.py):
the C loop, which this test environment must have built, against the Python loop."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.consumer.fetcher import ConsumerRecord

from airflow_stateful_provider.streams.errors import InvalidRecordError
from airflow_stateful_provider.streams.state import ChangelogRecord, RocksDBKeyValueStore
from airflow_stateful_provider.streams.state.keyvalue import changelog_batch


class ValueFirst(NamedTuple):
    """A named tuple record of another layout."""

    value: object
    key: object
    offset: int


def consumer_record(offset: int, key: object, value: object) -> ConsumerRecord:
    """A record as the restore consumer's batch decoder makes it."""
    return ConsumerRecord("app-store-changelog", 0, 0, offset, 1_000 + offset, 0, key, value, (), None,
                          -1, -1, -1)


class RecordingBatch:
    """Stands in for rocksdict's WriteBatch: notes each call; ``fail_on`` makes put raise."""

    def __init__(self, fail_on: bytes | None = None) -> None:
        self.calls: list[tuple] = []
        self.fail_on = fail_on

    def put(self, key: bytes, value: bytes) -> None:
        if key == self.fail_on:
            raise RuntimeError(f"put refused {key!r}")
        self.calls.append(("put", key, value))

    def delete(self, key: bytes) -> None:
        self.calls.append(("delete", key))


def outcome(fill, records: list) -> tuple:
    batch = RecordingBatch()
    try:
        return fill(batch, records), batch.calls, None
    except InvalidRecordError as exc:
        return None, batch.calls, str(exc)


def test_the_c_loop_is_built():
    assert changelog_batch.NATIVE is not None, "the C loop was not built: see the install's output (pip install -e .)"


@pytest.fixture(params=["C loop", "Python loop"])
def loop(request, monkeypatch):
    if request.param == "C loop":
        assert changelog_batch.NATIVE is not None, "the C loop was not built: see the install's output"
    else:
        monkeypatch.setattr(changelog_batch, "NATIVE", None)
    return request.param


keys = st.one_of(st.binary(max_size=6), st.none(), st.text(max_size=2), st.just(bytearray(b"k")))
values = st.one_of(st.binary(max_size=6), st.none(), st.integers(), st.just(memoryview(b"v")))


@settings(max_examples=300, deadline=None)
@given(fields=st.lists(st.tuples(keys, values, st.sampled_from(["decoded", "dataclass", "value first"])),
                      max_size=20))
def test_the_c_loop_fills_the_batch_as_the_python_loop(fields):
    """Any mix of the decoder's records and other records (read by index when the first
    record's type is a named tuple, else by attribute), good and bad: the same puts and deletes
    in the same order, the same count, and the same error naming the same record."""
    make = {"decoded": consumer_record, "value first": lambda i, key, value: ValueFirst(value, key, i),
            "dataclass": lambda i, key, value: ChangelogRecord(key, value, 1_000 + i, i)}
    records = [make[kind](i, key, value) for i, (key, value, kind) in enumerate(fields)]
    assert outcome(changelog_batch.fill_write_batch, records) == \
        outcome(changelog_batch.fill_write_batch_in_python, records)


def test_null_keys_are_skipped_null_values_delete_and_the_count_says_what_was_applied(loop):
    batch = RecordingBatch()
    records = (r for r in [consumer_record(0, b"a", b"1"), consumer_record(1, None, b"x"),
                           ChangelogRecord(b"b", None, 5, 2), consumer_record(3, b"a", b"")])  # any iterable
    assert changelog_batch.fill_write_batch(batch, records) == 3
    assert batch.calls == [("put", b"a", b"1"), ("delete", b"b"), ("put", b"a", b"")]


def test_a_bad_record_is_named_by_its_offset(loop):
    with pytest.raises(InvalidRecordError, match=r"offset 7 needs bytes key .* got key str 'k'"):
        changelog_batch.fill_write_batch(RecordingBatch(), [consumer_record(6, b"ok", b"v"),
                                                            consumer_record(7, "k", b"v")])
    with pytest.raises(InvalidRecordError, match=r"offset 9 .* value bytearray"):
        changelog_batch.fill_write_batch(RecordingBatch(), [ChangelogRecord(b"k", bytearray(b"v"), 0, 9)])  # type: ignore[arg-type]


def test_an_error_of_the_batch_itself_propagates(loop):
    batch = RecordingBatch(fail_on=b"b")
    with pytest.raises(RuntimeError, match="put refused b'b'"):
        changelog_batch.fill_write_batch(batch, [consumer_record(0, b"a", b"1"), consumer_record(1, b"b", b"2"),
                                                 consumer_record(2, b"c", b"3")])
    assert batch.calls == [("put", b"a", b"1")]


def test_a_record_without_key_or_value_is_the_error_of_its_type(loop):
    class Keyless:
        value = b"v"

    with pytest.raises(AttributeError, match="key"):
        changelog_batch.fill_write_batch(RecordingBatch(), [Keyless()])
    with pytest.raises(AttributeError, match="key"):  # a plain tuple is not read by position
        changelog_batch.fill_write_batch(RecordingBatch(), [(b"k", b"v")])


def test_a_rocksdb_store_restores_the_decoders_records_and_writes_nothing_of_a_bad_batch(loop, tmp_path):
    store = RocksDBKeyValueStore(tmp_path / "store", name="store")
    try:
        store.put(b"gone", b"old")
        assert store.restore_batch([consumer_record(0, b"a", b"1"), consumer_record(1, b"gone", None),
                                    consumer_record(2, None, b"skipped"), consumer_record(3, b"b", b"2")]) == 3
        assert list(store.all()) == [(b"a", b"1"), (b"b", b"2")]
        with pytest.raises(InvalidRecordError, match="offset 5"):
            store.restore_batch([consumer_record(4, b"c", b"3"), consumer_record(5, b"d", 4)])
        assert list(store.all()) == [(b"a", b"1"), (b"b", b"2")]  # not even the good record before it
    finally:
        store.close()


def test_the_decoders_records_are_read_by_index_and_others_by_attribute():
    """What keeps the C loop fast: the restore consumer's records are named tuples, read at
    their key and value positions; a dataclass or a plain tuple is not read by position."""
    assert changelog_batch._read_by_index(ConsumerRecord) == (ConsumerRecord, 6, 7)
    assert changelog_batch._read_by_index(ValueFirst) == (ValueFirst, 1, 0)
    assert changelog_batch._read_by_index(ChangelogRecord)[0] is not ChangelogRecord
    assert changelog_batch._read_by_index(tuple)[0] is not tuple
