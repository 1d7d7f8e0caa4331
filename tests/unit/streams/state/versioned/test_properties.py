"""Property tests: versioned stores (RocksDB and in-memory) against the reference model.

Random operation sequences with out-of-order timestamps, tombstones, retention (small
history retention and segment intervals so segments expire often), enforce_retention,
and, for RocksDB, close and reopen in the middle. Every answer must equal the model's.
"""

from __future__ import annotations

import tempfile
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_stateful_provider.streams.state import (
    ChangeloggingVersionedKeyValueStore,
    InMemoryVersionedKeyValueStore,
    ListChangelogWriter,
    RocksDBVersionedKeyValueStore,
)

from ..models import VersionedModel

KEYS = [b"", b"a", b"a\x00"]  # prefixes of each other: catches key-layout mixups
VALUES = [b"", b"x", b"yy", b"z" * 20]
# (impl, history retention, segment interval). Small intervals make segments expire often.
# RocksDB examples cost a few store opens each, so they get fewer configurations.
CASES = [
    ("rocksdb", 60, 20),
    ("rocksdb", 0, 7),
    ("memory", 60, 20),
    ("memory", 0, 7),
    ("memory", 100, 1000),
    ("memory", 300, 50),
]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def operations(draw, hr, interval, with_maintenance=True):
    """Mostly puts; time mostly moves forward in steps of up to two segments, and jumps
    back up to history retention + two segments (some of those land beyond retention)."""
    kinds = ["put", "put", "put", "put", "tombstone", "delete", "get", "get_as_of", "versions", "reopen"]
    if with_maintenance:
        kinds.append("enforce")
    forward = st.integers(0, max(2 * interval, 10))
    backward = st.integers(-(hr + 2 * interval), 0)
    clock = 0
    ops = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(kinds))
        ts = max(0, clock + draw(st.one_of(forward, forward, backward)))
        clock = max(clock, ts)
        key = draw(st.sampled_from(KEYS))
        if kind == "put":
            ops.append(("put", key, draw(st.sampled_from(VALUES)), ts))
        elif kind == "tombstone":
            ops.append(("put", key, None, ts))
        elif kind == "delete":
            ops.append(("delete", key, ts))
        elif kind == "get":
            ops.append(("get", key))
        elif kind == "get_as_of":
            ops.append(("get_as_of", key, ts))
        elif kind == "versions":
            lo = draw(st.none() | st.integers(0, clock + 10))
            hi = draw(st.none() | st.integers(0, clock + 10))
            ops.append(("versions", key, lo, hi, draw(st.booleans())))
        elif kind == "reopen":
            ops.append(("reopen",))
        else:
            ops.append(("enforce", clock + draw(st.integers(0, hr + interval))))
    return ops


def _as_tuple(record):
    return None if record is None else (record.value, record.timestamp, record.valid_to)


class _Harness:
    """A store (optionally wrapped in changelogging) that can be closed and reopened."""

    def __init__(self, impl, directory, hr, interval):
        self.impl, self.directory, self.hr, self.interval = impl, directory, hr, interval
        self.changelog = ListChangelogWriter()
        self.store = self._open()

    def _open(self):
        if self.impl == "rocksdb":
            inner = RocksDBVersionedKeyValueStore(f"{self.directory}/store", self.hr, segment_interval=self.interval)
        else:
            inner = InMemoryVersionedKeyValueStore(self.hr, segment_interval=self.interval)
        return ChangeloggingVersionedKeyValueStore(inner, self.changelog)

    def reopen(self):
        if self.impl == "rocksdb":
            self.store.close()
            self.store = self._open()


def _probe_times(model, clock):
    """Answers change only at version timestamps and the retention boundary: probe those."""
    times = {0, clock + 1, model.observed - model.hr, model.observed - model.hr - 1}
    for timeline in model.timelines.values():
        for ts in timeline:
            times.update((ts - 1, ts, ts + 1))
    return sorted(t for t in times if t >= 0)


def _compare_everything(store, model, clock):
    times = _probe_times(model, clock)
    for key in KEYS:
        assert _as_tuple(store.get(key)) == model.get(key)
        for ascending in (False, True):
            got = [_as_tuple(r) for r in store.get_versions(key, ascending=ascending)]
            assert got == model.get_versions(key, None, None, ascending)
        for t in times:
            assert _as_tuple(store.get(key, t)) == model.get(key, t), (key, t)
        for lo, hi in pairwise(times):
            got = [_as_tuple(r) for r in store.get_versions(key, lo, hi)]
            assert got == model.get_versions(key, lo, hi, False), (key, lo, hi)


def _run(ops, harness, model):
    clock = 0
    for op in ops:
        kind = op[0]
        store = harness.store
        if kind == "put":
            _, key, value, ts = op
            clock = max(clock, ts)
            assert store.put(key, value, ts) == model.put(key, value, ts), op
            got = [_as_tuple(r) for r in store.get_versions(key, ascending=True)]
            assert got == model.get_versions(key, None, None, True), op
        elif kind == "delete":
            _, key, ts = op
            clock = max(clock, ts)
            assert _as_tuple(store.delete(key, ts)) == model.delete(key, ts), op
        elif kind == "get":
            assert _as_tuple(store.get(op[1])) == model.get(op[1]), op
        elif kind == "get_as_of":
            assert _as_tuple(store.get(op[1], op[2])) == model.get(op[1], op[2]), op
        elif kind == "versions":
            _, key, lo, hi, ascending = op
            got = [_as_tuple(r) for r in store.get_versions(key, lo, hi, ascending)]
            assert got == model.get_versions(key, lo, hi, ascending), op
        elif kind == "reopen":
            harness.reopen()
        elif kind == "enforce":
            clock = max(clock, op[1])
            store.enforce_retention(op[1])
            model.enforce_retention(op[1])
    return clock


@pytest.mark.parametrize("impl, hr, interval", CASES)
@SETTINGS
@given(data=st.data())
def test_versioned_store_matches_model(impl, hr, interval, data):
    ops = data.draw(operations(hr, interval), label="ops")
    with tempfile.TemporaryDirectory() as directory:
        harness = _Harness(impl, directory, hr, interval)
        model = VersionedModel(hr, interval)
        try:
            clock = _run(ops, harness, model)
            harness.reopen()
            _compare_everything(harness.store, model, clock)
        finally:
            harness.store.close()


@pytest.mark.parametrize("impl, hr, interval", CASES)
@SETTINGS
@given(data=st.data(), batch_sizes=st.lists(st.integers(1, 15), min_size=1, max_size=5))
def test_restore_from_changelog_reproduces_the_store(impl, hr, interval, data, batch_sizes):
    ops = data.draw(operations(hr, interval, with_maintenance=False), label="ops")
    with tempfile.TemporaryDirectory() as directory:
        harness = _Harness(impl, directory, hr, interval)
        model = VersionedModel(hr, interval)
        restored = None
        try:
            clock = _run(ops, harness, model)
            records = harness.changelog.records
            if impl == "rocksdb":
                restored = RocksDBVersionedKeyValueStore(f"{directory}/restored", hr, segment_interval=interval)
            else:
                restored = InMemoryVersionedKeyValueStore(hr, segment_interval=interval)
            position, i = 0, 0
            while position < len(records):
                size = batch_sizes[i % len(batch_sizes)]
                restored.restore_batch(records[position : position + size])
                position += size
                i += 1
            assert restored.observed_stream_time == harness.store.observed_stream_time
            _compare_everything(restored, model, clock)
            if impl == "rocksdb":
                assert _same_rows(restored, harness.store.inner)  # physically identical too
        finally:
            harness.store.close()
            if restored is not None:
                restored.close()


def _same_rows(a, b):
    """Same RocksDB rows (latest values and segment rows), byte for byte."""
    skip = b"\x00observed_stream_time"
    rows_a = {k: v for k, v in a._db.items() if k != skip}
    rows_b = {k: v for k, v in b._db.items() if k != skip}
    return rows_a == rows_b
