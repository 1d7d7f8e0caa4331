"""Property tests: session stores (RocksDB and in-memory) against the reference model,
and restoring from the changelog reproducing the store."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_stateful_provider.streams.state import (
    ChangeloggingSessionStore,
    InMemorySessionStore,
    ListChangelogWriter,
    RocksDBSessionStore,
    SessionKey,
)

from ..models import SessionModel

KEYS = [b"", b"a", b"a\x00"]
AGGS = [b"", b"1", b"22", b"x" * 30]
#: "rocksdb-indexed": with the time index of emit-on-window-close stores (state/session/index.py)
CASES = [("rocksdb", 100_000), ("rocksdb-indexed", 100_000), ("memory", 100_000), ("memory", 400_000)]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def operations(draw, retention, with_maintenance=True):
    interval = max(retention // 2, 60_000)
    kinds = ["put", "put", "put", "put", "remove", "find", "fetch", "fetch_session", "by_end", "reopen"]
    if with_maintenance:
        kinds.append("enforce")
    forward = st.integers(0, 2 * interval)
    backward = st.integers(-(retention + 2 * interval), 0)
    clock = 0
    written: list[tuple[bytes, int, int]] = []
    ops = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(kinds))
        if draw(st.integers(0, 5)) == 0:  # right at the retention boundary
            end = max(0, clock - retention + draw(st.integers(-1, 1)))
        else:
            end = max(0, clock + draw(st.one_of(forward, forward, backward)))
        clock = max(clock, end)
        start = max(0, end - draw(st.integers(0, 30_000)))
        key = draw(st.sampled_from(KEYS))
        if kind == "put":
            written.append((key, start, end))
            ops.append(("put", SessionKey(key, start, end), draw(st.sampled_from(AGGS + [None]))))
        elif kind == "remove":
            if written and draw(st.booleans()):
                key, start, end = draw(st.sampled_from(written))
            ops.append(("remove", SessionKey(key, start, end)))
        elif kind == "find":
            ops.append(("find", key, end - draw(st.integers(0, 50_000)), end + draw(st.integers(0, 50_000))))
        elif kind == "fetch":
            ops.append(("fetch", key))
        elif kind == "fetch_session":
            if written and draw(st.booleans()):
                key, start, end = draw(st.sampled_from(written))
            ops.append(("fetch_session", key, start, end))
        elif kind == "by_end":
            ops.append(("by_end", max(0, end - draw(st.integers(0, retention))), end))
        elif kind == "reopen":
            ops.append(("reopen",))
        else:
            ops.append(("enforce", clock + draw(st.integers(0, retention + interval))))
    return ops


def _flat(results):
    return [(s.key, s.start, s.end, agg) for s, agg in results]


class _Harness:
    def __init__(self, impl, directory, retention):
        self.impl, self.directory, self.retention = impl, directory, retention
        self.changelog = ListChangelogWriter()
        self.store = self._open()

    def _open(self):
        if self.impl.startswith("rocksdb"):
            inner = RocksDBSessionStore(f"{self.directory}/store", self.retention,
                                        time_index=self.impl == "rocksdb-indexed")
        else:
            inner = InMemorySessionStore(self.retention)
        return ChangeloggingSessionStore(inner, self.changelog)

    def reopen(self):
        if self.impl.startswith("rocksdb"):
            self.store.close()
            self.store = self._open()


def _run(ops, harness, model):
    for op in ops:
        kind, store = op[0], harness.store
        if kind == "put":
            _, session, agg = op
            store.put(session, agg)
            model.put(*session, agg)
            assert _flat(store.fetch(session.key)) == model.find_sessions(session.key, 0, 1 << 62), op
        elif kind == "remove":
            store.remove(op[1])
            model.remove(*op[1])
            assert _flat(store.fetch(op[1].key)) == model.find_sessions(op[1].key, 0, 1 << 62), op
        elif kind == "find":
            _, key, earliest_end, latest_start = op
            assert _flat(store.find_sessions(key, earliest_end, latest_start)) == model.find_sessions(
                key, earliest_end, latest_start
            ), op
        elif kind == "fetch":
            assert _flat(store.fetch(op[1])) == model.find_sessions(op[1], 0, 1 << 62), op
        elif kind == "fetch_session":
            assert store.fetch_session(*op[1:]) == model.fetch_session(*op[1:]), op
        elif kind == "by_end":
            assert _flat(store.find_sessions_by_end(op[1], op[2])) == model.find_sessions_by_end(op[1], op[2]), op
        elif kind == "reopen":
            harness.reopen()
        elif kind == "enforce":
            store.enforce_retention(op[1])
            model.enforce_retention(op[1])


def _compare_everything(store, model):
    assert store.observed_stream_time == model.observed
    for key in KEYS:
        assert _flat(store.fetch(key)) == model.find_sessions(key, 0, 1 << 62)
    assert _flat(store.find_sessions_by_end(0, 1 << 62)) == model.find_sessions_by_end(0, 1 << 62)
    visible = sorted((k, s, e, agg) for (k, s, e), agg in model.data.items() if model._visible(e))
    assert sorted(_flat(store.all())) == visible


@pytest.mark.parametrize("impl, retention", CASES)
@SETTINGS
@given(data=st.data())
def test_session_store_matches_model(impl, retention, data):
    ops = data.draw(operations(retention), label="ops")
    with tempfile.TemporaryDirectory() as directory:
        harness = _Harness(impl, directory, retention)
        model = SessionModel(retention)
        try:
            _run(ops, harness, model)
            harness.reopen()
            _compare_everything(harness.store, model)
        finally:
            harness.store.close()


@pytest.mark.parametrize("impl, retention", CASES)
@SETTINGS
@given(data=st.data(), batch_sizes=st.lists(st.integers(1, 15), min_size=1, max_size=5))
def test_restore_from_changelog_reproduces_the_store(impl, retention, data, batch_sizes):
    ops = data.draw(operations(retention, with_maintenance=False), label="ops")
    with tempfile.TemporaryDirectory() as directory:
        harness = _Harness(impl, directory, retention)
        model = SessionModel(retention)
        restored = None
        try:
            _run(ops, harness, model)
            records = harness.changelog.records
            if impl.startswith("rocksdb"):
                restored = RocksDBSessionStore(f"{directory}/restored", retention,
                                               time_index=impl == "rocksdb-indexed")
            else:
                restored = InMemorySessionStore(retention)
            position = i = 0
            while position < len(records):
                size = batch_sizes[i % len(batch_sizes)]
                restored.restore_batch(records[position : position + size])
                position, i = position + size, i + 1
            _compare_everything(restored, model)
        finally:
            harness.store.close()
            if restored is not None:
                restored.close()
