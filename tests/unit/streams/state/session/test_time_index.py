"""The time index of session stores (state/session/index.py): emit-on-window-close with it
forwards exactly what the segment scan it replaces forwards, through merges, deletes,
expiry, reopening, restoring from the changelog and building the index on a store that
had none; and the DSL gives it to emit-on-window-close stores only."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.state import (
    ChangeloggingSessionStore,
    InMemorySessionStore,
    ListChangelogWriter,
    RocksDBSessionStore,
    SessionKey,
    open_store,
)
from airflow_stateful_provider.streams.state.session.index import SessionEndIndex
from airflow_stateful_provider.streams.testing import TopologyTestDriver
from airflow_stateful_provider.streams.windows import EmitStrategy, SessionWindowedSerde, SessionWindows

from ..models import SessionModel
from .test_stores import I64, CountAggregation

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = [b"", b"a", b"a\x00", b"b", b"user-7"]
#: (inactivity gap, grace, retention): retention gap + grace (the DSL default) or longer,
#: small enough next to the 60 s segments that stream time crosses several of them
WINDOWS = [(10, 0, 10), (1_000, 500, 1_500), (30_000, 5_000, 100_000), (20_000, 0, 200_000)]


@st.composite
def clicks_and_events(draw):
    """(key, timestamp) clicks, mostly moving stream time on, some late, some far ahead
    (segment expiry), with ``("remove",)``, ``("reopen",)`` and ``("restore", batch size)``
    events between them."""
    steps = st.one_of(st.integers(0, 3_000), st.integers(0, 40_000), st.integers(-50_000, 0),
                      st.integers(60_000, 200_000))
    clock, ops = 0, []
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.sampled_from(["click"] * 12 + ["remove", "reopen", "restore"]))
        if kind == "click":
            ts = max(0, clock + draw(steps))
            clock = max(clock, ts)
            ops.append(("click", draw(st.sampled_from(KEYS)), ts))
        elif kind == "restore":
            ops.append(("restore", draw(st.integers(1, 20))))
        else:
            ops.append((kind,))
    return ops


class _Variant:
    """One store implementation behind a changelogging wrapper, as the runtime stacks them:
    ``kind`` "indexed" (RocksDB with the time index), "scan" (RocksDB without: the segment
    scan), "late-index" (RocksDB without, given the index at its first reopen) or "memory"."""

    def __init__(self, kind: str, directory: str, retention: int) -> None:
        self.kind, self.directory, self.retention = kind, directory, retention
        self.generation = 0
        self.changelog = ListChangelogWriter()
        self.store = ChangeloggingSessionStore(self._open(self.kind == "indexed"), self.changelog)

    def _open(self, time_index: bool):
        if self.kind == "memory":
            return InMemorySessionStore(self.retention)
        return RocksDBSessionStore(f"{self.directory}/{self.kind}-{self.generation}", self.retention,
                                   time_index=time_index)

    def reopen(self) -> None:
        if self.kind != "memory":
            self.store.inner.close()
            self.store = ChangeloggingSessionStore(self._open(self.kind != "scan"), self.changelog)

    def restore(self, batch_size: int) -> None:
        """A new store (a task moved, or its state was lost) filled from the changelog."""
        self.store.inner.close()
        self.generation += 1
        restored = self._open(self.kind in ("indexed", "late-index"))
        records = self.changelog.records
        for at in range(0, len(records), batch_size):
            restored.restore_batch(records[at:at + batch_size])
        self.store = ChangeloggingSessionStore(restored, self.changelog)

    def close(self) -> None:
        self.store.inner.close()


VARIANTS = ("indexed", "scan", "late-index", "memory")


@SETTINGS
@given(window=st.sampled_from(WINDOWS), ops=clicks_and_events(), data=st.data())
def test_emit_on_close_with_the_index_forwards_what_the_segment_scan_forwards(window, ops, data):
    gap, grace, retention = window
    with tempfile.TemporaryDirectory() as directory:
        variants = [_Variant(kind, directory, retention) for kind in VARIANTS]
        runs = [CountAggregation(v.store, gap, grace, emit_on_close=True) for v in variants]
        try:
            for op in ops:
                if op[0] == "click":
                    for run in runs:
                        run.process(op[1], op[2])
                elif op[0] == "remove":  # a session deleted outside a merge
                    sessions = runs[0].store.find_sessions_by_end(0, 1 << 62)
                    if sessions:
                        victim = data.draw(st.sampled_from([s for s, _ in sessions]), label="removed")
                        for run in runs:
                            run.store.remove(victim)
                else:
                    for variant, run in zip(variants, runs, strict=True):
                        variant.reopen() if op[0] == "reopen" else variant.restore(op[1])
                        run.store = variant.store
                reference = runs[1].forwarded
                for variant, run in zip(variants, runs, strict=True):
                    assert run.forwarded == reference, (variant.kind, op)
            everything = [v.store.find_sessions_by_end(0, 1 << 62) for v in variants]
            assert all(found == everything[1] for found in everything), everything
            assert all(v.store.observed_stream_time == variants[1].store.observed_stream_time for v in variants)
        finally:
            for variant in variants:
                variant.close()


def _emit_final_topology(emit: EmitStrategy, window) -> object:
    gap, grace, _ = window
    builder = StreamsBuilder()
    (builder.stream("clicks", Consumed.with_(Serdes.string(), Serdes.string())).group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_and_grace(gap, grace)).emit_strategy(emit)
     .count(Materialized.as_("sessions")).to_stream()
     .to("counts", Produced.with_(SessionWindowedSerde(Serdes.string()), Serdes.int64())))
    return builder.build()


def _dsl_output(topology, clicks, store_type: str) -> list:
    config = {"windowed_aggregation_emit_interval_ms": 0}
    with TopologyTestDriver(topology, config, store_type=store_type) as driver:
        if store_type == "rocksdb":  # the runtime builds the store the builder describes
            store = driver.tasks[0].stores.raw_store("sessions")
            assert store.time_index == topology.store_builder("sessions").time_index
        clicks_in = driver.create_input_topic("clicks", Serdes.string(), Serdes.string())
        counts = driver.create_output_topic("counts", SessionWindowedSerde(Serdes.string()), Serdes.int64())
        for key, ts in clicks:
            clicks_in.pipe_input(key, "click", ts)
        return [(r.key, r.value, r.timestamp) for r in counts.read_records_to_list()]


@settings(SETTINGS, max_examples=15)  # three TopologyTestDriver runs each, committing after every record
@given(window=st.sampled_from(WINDOWS), ops=clicks_and_events())
def test_dsl_emit_on_close_forwards_the_same_with_the_index_as_with_the_segment_scan(window, ops):
    clicks = [(op[1].decode("latin-1"), op[2]) for op in ops if op[0] == "click"]
    topology = _emit_final_topology(EmitStrategy.on_window_close(), window)
    builder = topology.store_builder("sessions")
    assert builder.time_index  # the DSL asks for the index
    indexed = _dsl_output(topology, clicks, "rocksdb")
    assert _dsl_output(topology, clicks, "in_memory") == indexed
    builder.time_index = False
    assert _dsl_output(topology, clicks, "rocksdb") == indexed


def test_only_emit_on_close_stores_get_the_index():
    window = WINDOWS[1]
    assert _emit_final_topology(EmitStrategy.on_window_close(), window).store_builder("sessions").time_index
    assert not _emit_final_topology(EmitStrategy.on_window_update(), window).store_builder("sessions").time_index


# -- the RocksDB index's life cycle ------------------------------------------------------------------

S = SessionKey
RETENTION = 100_000  # segments of 60 s


def _fill(store, base: int = 0) -> None:
    for i in range(40):
        end = base + i * 5_000
        store.put(S(b"k%d" % (i % 6), end - i * 100, end), I64.pack(i))
    store.remove(S(b"k1", base + 185_000 - 3_700, base + 185_000))  # live: i = 37


def _flat(found):
    return [(s.key, s.start, s.end, agg) for s, agg in found]


class _ModelAsStore:
    """The reference model behind the store interface _fill uses."""

    def __init__(self) -> None:
        self.model = SessionModel(RETENTION)

    def put(self, session, agg):
        self.model.put(*session, agg)

    def remove(self, session):
        self.model.remove(*session)


def test_a_store_without_the_index_gets_it_when_opened_for_emit_on_close(tmp_path):
    expected = _ModelAsStore()
    _fill(expected)
    plain = RocksDBSessionStore(tmp_path / "s", RETENTION)
    _fill(plain)
    assert not plain.time_index
    plain.close()
    indexed = RocksDBSessionStore(tmp_path / "s", RETENTION, time_index=True)
    try:
        assert indexed.time_index
        assert _flat(indexed.find_sessions_by_end(0, 1 << 62)) == expected.model.find_sessions_by_end(0, 1 << 62)
        assert _flat(indexed.find_sessions_by_end(60_000, 120_000)) == expected.model.find_sessions_by_end(
            60_000, 120_000)
    finally:
        indexed.close()


def test_a_store_with_the_index_keeps_it_up_to_date_when_opened_without_asking(tmp_path):
    """A maintenance run (open_store) writes and expires without the flag; the index the
    application opens next must hold no stale row and miss no session."""
    expected = _ModelAsStore()
    RocksDBSessionStore(tmp_path / "s", RETENTION, time_index=True).close()
    maintenance = open_store(tmp_path / "s")
    try:
        assert maintenance.time_index
        _fill(maintenance)
        _fill(expected)
        maintenance.enforce_retention(150_000)
        expected.model.enforce_retention(150_000)
    finally:
        maintenance.close()
    store = RocksDBSessionStore(tmp_path / "s", RETENTION, time_index=True)
    try:
        _fill(store, base=150_000)
        _fill(expected, base=150_000)
        assert _flat(store.find_sessions_by_end(0, 1 << 62)) == expected.model.find_sessions_by_end(0, 1 << 62)
    finally:
        store.close()
    reader = open_store(tmp_path / "s", read_only=True)  # a secondary reads the same index
    try:
        assert _flat(reader.find_sessions_by_end(0, 1 << 62)) == expected.model.find_sessions_by_end(0, 1 << 62)
    finally:
        reader.close()


def _indexed_sessions(store) -> list[SessionKey]:
    """The sessions the index rows of ``store`` name (end | start | key after the 0x03 byte)."""
    rows = [key for key, _ in store._db.items() if key[:1] == b"\x03"]
    return [S(row[17:], int.from_bytes(row[9:17], "big"), int.from_bytes(row[1:9], "big")) for row in rows]


def test_index_rows_go_with_their_sessions_removed_or_expired(tmp_path):
    store = RocksDBSessionStore(tmp_path / "s", RETENTION, time_index=True)
    try:
        _fill(store)
        assert _indexed_sessions(store) == [s for s, _ in store.find_sessions_by_end(0, 1 << 62)]
        assert S(b"k1", 181_300, 185_000) not in _indexed_sessions(store)  # the removed one
        store.put(S(b"late", 400_000, 400_000), b"x")  # segments below (400000 - 100000) // 60000 = 5 die
        assert _indexed_sessions(store) == [S(b"late", 400_000, 400_000)]
    finally:
        store.close()


def test_an_index_row_whose_session_is_gone_is_skipped(tmp_path):
    """What a store recovered without its write-ahead log can hold: the session row deleted,
    its index row not yet (a put writes the index row first, a remove deletes it last)."""
    store = RocksDBSessionStore(tmp_path / "s", RETENTION, time_index=True)
    try:
        store.put(S(b"a", 0, 10), b"1")
        store.put(S(b"b", 5, 10), b"2")
        segment_row = b"\x02" + (0).to_bytes(8, "big") + b"a" + (10).to_bytes(8, "big") + (0).to_bytes(8, "big")
        store._db.delete(segment_row)
        assert store.find_sessions_by_end(0, 100) == [(S(b"b", 5, 10), b"2")]
    finally:
        store.close()


def test_in_memory_end_index_orders_by_end_key_start():
    index = SessionEndIndex()
    for key, start, end in [(b"b", 0, 5), (b"a", 3, 5), (b"a", 0, 9), (b"a", 1, 5), (b"a", 3, 5)]:
        index.add(key, start, end)
    assert index.ending_between(5, 5) == [(5, b"a", 1), (5, b"a", 3), (5, b"b", 0)]
    index.discard(b"a", 1, 5)
    index.discard(b"zz", 1, 5)  # absent: nothing happens
    index.drop_below(6)
    assert index.ending_between(0, 1 << 63) == [(9, b"a", 0)] and len(index) == 1
