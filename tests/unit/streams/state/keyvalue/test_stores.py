"""Key-value stores, RocksDB and in memory: API, ranges, bad input, model-based properties."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_stateful_provider.streams.errors import InvalidRecordError, InvalidStoreError
from airflow_stateful_provider.streams.state import (
    ChangeloggingKeyValueStore,
    ChangelogRecord,
    InMemoryKeyValueStore,
    KeyValueStore,
    ListChangelogWriter,
    RocksDBKeyValueStore,
)


def test_basic_operations(make_kv):
    store = make_kv()
    assert isinstance(store, KeyValueStore)
    assert store.get(b"k") is None
    store.put(b"k", b"v")
    assert store.get(b"k") == b"v"
    assert store.put_if_absent(b"k", b"other") == b"v"
    assert store.put_if_absent(b"k2", b"w") is None
    assert store.get(b"k2") == b"w"
    assert store.delete(b"k") == b"v"
    assert store.delete(b"k") is None
    store.put(b"k2", None)  # None deletes, as in Kafka Streams
    assert store.get(b"k2") is None
    store.put(b"empty", b"")  # an empty value is a value, not a tombstone
    assert store.get(b"empty") == b""


def test_ranges_are_inclusive_and_ordered_as_unsigned_bytes(make_kv):
    store = make_kv()
    keys = [b"", b"a", b"a\x00", b"ab", b"b", b"\xff"]
    store.put_all((k, b"v" + k) for k in reversed(keys))
    assert [k for k, _ in store.all()] == keys
    assert [k for k, _ in store.reverse_all()] == keys[::-1]
    assert [k for k, _ in store.range(b"a", b"ab")] == [b"a", b"a\x00", b"ab"]
    assert [k for k, _ in store.reverse_range(b"a", b"ab")] == [b"ab", b"a\x00", b"a"]
    assert [k for k, _ in store.range(b"a\x01", None)] == [b"ab", b"b", b"\xff"]
    assert [k for k, _ in store.range(None, b"a")] == [b"", b"a"]
    assert list(store.range(b"b", b"a")) == []  # from > to: empty, as Kafka
    assert dict(store.range(b"ab", b"ab")) == {b"ab": b"vab"}
    assert store.approximate_num_entries() >= 1


def test_put_all_applies_deletes(make_kv):
    store = make_kv()
    store.put_all([(b"a", b"1"), (b"b", b"2"), (b"a", None)])
    assert list(store.all()) == [(b"b", b"2")]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda s: s.put(None, b"v"), "key cannot be null"),
        (lambda s: s.put("k", b"v"), "keys must be bytes, got str 'k'"),
        (lambda s: s.put(b"k", "v"), "values must be bytes or None, got str 'v'"),
        (lambda s: s.get(1), "keys must be bytes, got int 1"),
        (lambda s: list(s.range("a", None)), "from_key must be bytes or None, got str"),
        (lambda s: s.put_all([(b"k", 5)]), "values must be bytes or None, got int 5"),
    ],
)
def test_bad_input(make_kv, call, match):
    with pytest.raises(InvalidRecordError, match=match):
        call(make_kv())


def test_closed_store_refuses(make_kv):
    store = make_kv()
    store.close()
    with pytest.raises(InvalidStoreError, match="closed"):
        store.get(b"k")


def test_restore_batch_skips_null_keys_and_applies_tombstones(make_kv):
    store = make_kv()
    store.put(b"gone", b"x")
    applied = store.restore_batch(
        [
            ChangelogRecord(b"a", b"1", 5, 0),
            ChangelogRecord(None, b"skipped", 6, 1),
            ChangelogRecord(b"gone", None, 7, 2),
            ChangelogRecord(b"a", b"2", 8, 3),
        ]
    )
    assert applied == 3
    assert list(store.all()) == [(b"a", b"2")]


def test_changelogging_wrapper_sends_every_write(make_kv):
    changelog = ListChangelogWriter()
    clock = iter(range(100, 200))
    store = ChangeloggingKeyValueStore(make_kv(), changelog, timestamp_fn=lambda: next(clock))
    store.put(b"a", b"1")
    store.put_if_absent(b"a", b"ignored")
    store.put_if_absent(b"b", b"2")
    store.delete(b"a")
    store.put_all([(b"c", b"3"), (b"b", None)])
    assert [(r.key, r.value, r.timestamp, r.offset) for r in changelog.records] == [
        (b"a", b"1", 100, 0),
        (b"b", b"2", 101, 1),
        (b"a", None, 102, 2),
        (b"c", b"3", 103, 3),
        (b"b", None, 103, 4),
    ]
    assert store.get(b"c") == b"3"  # reads go to the inner store


KEYS = st.sampled_from([b"", b"a", b"a\x00", b"ab", b"b", b"\xff\x00"])
VALUES = st.sampled_from([b"", b"1", b"22"]) | st.none()
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), KEYS, VALUES),
        st.tuples(st.just("delete"), KEYS),
        st.tuples(st.just("range"), KEYS | st.none(), KEYS | st.none()),
        st.tuples(st.just("put_all"), st.lists(st.tuples(KEYS, VALUES), max_size=4)),
        st.tuples(st.just("reopen")),
    ),
    max_size=40,
)


@pytest.mark.parametrize("impl", ["rocksdb", "memory"])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_matches_a_dict_and_restores_from_its_changelog(impl, ops):
    with tempfile.TemporaryDirectory() as directory:
        changelog = ListChangelogWriter()

        def open_store(name="store"):
            inner = RocksDBKeyValueStore(f"{directory}/{name}") if impl == "rocksdb" else InMemoryKeyValueStore()
            return ChangeloggingKeyValueStore(inner, changelog, timestamp_fn=lambda: 0)

        store = open_store()
        model: dict[bytes, bytes] = {}
        try:
            for op in ops:
                if op[0] == "put":
                    store.put(op[1], op[2])
                    if op[2] is None:
                        model.pop(op[1], None)
                    else:
                        model[op[1]] = op[2]
                elif op[0] == "delete":
                    assert store.delete(op[1]) == model.pop(op[1], None)
                elif op[0] == "range":
                    lo, hi = op[1], op[2]
                    expected = sorted(
                        (k, v) for k, v in model.items() if (lo is None or k >= lo) and (hi is None or k <= hi)
                    )
                    assert list(store.range(lo, hi)) == expected
                    assert list(store.reverse_range(lo, hi)) == expected[::-1]
                elif op[0] == "put_all":
                    store.put_all(op[1])
                    for k, v in op[1]:
                        if v is None:
                            model.pop(k, None)
                        else:
                            model[k] = v
                elif impl == "rocksdb":
                    store.close()
                    store = open_store()
            assert list(store.all()) == sorted(model.items())
            restored = RocksDBKeyValueStore(f"{directory}/restored") if impl == "rocksdb" else InMemoryKeyValueStore()
            restored.restore_batch(changelog.records)
            assert list(restored.all()) == sorted(model.items())
            restored.close()
        finally:
            store.close()


def test_restore_batch_rejects_invalid_records_naming_the_offset(make_kv):
    store = make_kv()
    with pytest.raises(InvalidRecordError, match="offset 4.*key str 'k'"):
        store.restore_batch([ChangelogRecord("k", b"v", 0, 4)])
    with pytest.raises(InvalidRecordError, match="offset 5.*value int"):
        store.restore_batch([ChangelogRecord(b"k", 7, 0, 5)])
