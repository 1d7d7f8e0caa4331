"""docs/semantics.md §4 through the TopologyTestDriver (count, merger = sum, no caching)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.errors import ConfigError, TopologyError
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.testing import TestRecord, TopologyTestDriver
from airflow_stateful_provider.streams.windows import (
    EmitStrategy,
    SessionWindow,
    SessionWindowedSerde,
    SessionWindows,
    Windowed,
)

G = 300_000
KEY_SERDE = SessionWindowedSerde(Serdes.string())
STORE_TYPES = ["in_memory", "rocksdb"]


def _topology(windows: SessionWindows, emit: EmitStrategy | None = None, retention=None):
    builder = StreamsBuilder()
    materialized = Materialized.as_("sessions")
    if retention is not None:
        materialized = materialized.with_retention(retention)
    stream = builder.stream("clicks", Consumed.with_(Serdes.string(), Serdes.string()))
    windowed = stream.group_by_key().windowed_by(windows)
    if emit is not None:
        windowed = windowed.emit_strategy(emit)
    windowed.count(materialized).to_stream().to("counts", Produced.with_(KEY_SERDE, Serdes.int64()))
    return builder.build()


def _w(key, start, end):
    return Windowed(key, SessionWindow(start, end))


class _Run:
    def __init__(self, topology, store_type, **config):
        cfg = {"windowed_aggregation_emit_interval_ms": 0, **config}
        self.driver = TopologyTestDriver(topology, cfg, store_type=store_type)
        self.input = self.driver.create_input_topic("clicks", Serdes.string(), Serdes.string())
        self.output = self.driver.create_output_topic("counts", KEY_SERDE, Serdes.int64())

    def pipe(self, key, ts):
        self.input.pipe_input(key, "click", ts)

    def out(self):
        return [(r.key, r.value, r.timestamp) for r in self.output.read_records_to_list()]

    def dropped(self, reason=None):
        m = self.driver.metrics()
        return m.get("dropped-records-total" if reason is None else f"dropped-records-total:{reason}", 0)


@pytest.fixture(params=STORE_TYPES)
def store_type(request):
    return request.param


@pytest.fixture
def run(store_type):
    runs = []

    def make(topology, **config):
        r = _Run(topology, store_type, **config)
        runs.append(r)
        return r

    yield make
    for r in runs:
        r.driver.close()


def test_windows_validation():
    with pytest.raises(ConfigError, match="gap"):
        SessionWindows.of_inactivity_gap_with_no_grace(0)
    with pytest.raises(ConfigError, match="gap"):
        SessionWindows.of_inactivity_gap_and_grace(-5, 0)
    with pytest.raises(ConfigError, match="grace"):
        SessionWindows.of_inactivity_gap_and_grace(10, -1)
    w = SessionWindows.of_inactivity_gap_and_grace(timedelta(minutes=5), timedelta(minutes=1))
    assert (w.inactivity_gap_ms, w.grace_period_ms, w.default_retention_ms()) == (300_000, 60_000, 360_000)


def test_a0_a5_update_tombstone_merge(run):
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(G)))
    r.pipe("a", 0)
    r.pipe("a", 5)
    assert r.out() == [(_w("a", 0, 0), 1, 0), (_w("a", 0, 0), None, 0), (_w("a", 0, 5), 2, 5)]
    assert r.driver.get_session_store("sessions").fetch("a") == [(_w("a", 0, 5), 2)]


def test_a0_a0_one_session_count_2_no_tombstone(run):
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(G)))
    r.pipe("a", 0)
    r.pipe("a", 0)
    assert r.out() == [(_w("a", 0, 0), 1, 0), (_w("a", 0, 0), 2, 0)]
    assert r.driver.get_session_store("sessions").fetch("a") == [(_w("a", 0, 0), 2)]


def test_gap_of_exactly_gap_merges(run):
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(G)))
    r.pipe("a", 0)
    r.pipe("a", G)
    assert r.out()[-1] == (_w("a", 0, G), 2, G)


def test_a0_aG1_two_sessions_then_aG2_merges_all_three(run):
    """docs/semantics.md §4's merge example, with the store retention Kafka Streams' own test of it uses
    (3 x gap, KStreamSessionWindowAggregateProcessorTest.shouldMergeSessions)."""
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(G), retention=3 * G))
    r.pipe("a", 0)
    r.pipe("a", G + 1)
    assert r.out() == [(_w("a", 0, 0), 1, 0), (_w("a", G + 1, G + 1), 1, G + 1)]
    r.pipe("a", G // 2)
    assert r.out() == [
        (_w("a", 0, 0), None, 0),
        (_w("a", G + 1, G + 1), None, G + 1),
        (_w("a", 0, G + 1), 3, G + 1),
    ]
    assert r.driver.get_session_store("sessions").fetch("a") == [(_w("a", 0, G + 1), 3)]


def test_a0_aG1_aG2_with_default_retention_kafka_wins(run):
    """With the default store retention (gap + grace = G), Kafka Streams' session store
    no longer returns [0,0] once its observed stream time is G+1 (reads start at
    observed - retention + 1 = 2), so a@G/2 only merges with [G+1, G+1], as in Kafka Streams
    (docs/semantics.md §4, the default-retention row); the three-way merge needs a longer
    retention (test above)."""
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(G)))
    for ts in (0, G + 1, G // 2):
        r.pipe("a", ts)
    assert r.out()[2:] == [(_w("a", G + 1, G + 1), None, G + 1), (_w("a", G // 2, G + 1), 2, G + 1)]


def test_gap10_grace0_late_record_dropped_and_counted(run):
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(10)))
    r.pipe("x", 0)
    r.pipe("y", 0)
    r.pipe("x", 11)
    r.out()
    r.pipe("y", 0)  # close = 11 - 0 - 10 = 1 > end 0: late
    assert r.out() == []
    assert r.dropped("late") == 1
    # store untouched: y's [0,0] still holds its first count (hidden by retention or not)
    assert all(value == 1 for _, value in r.driver.get_session_store("sessions").fetch("y"))


def test_gap10_grace1_accepted_at_11_dropped_after_12(run):
    r = run(_topology(SessionWindows.of_inactivity_gap_and_grace(10, 1)))
    r.pipe("x", 0)
    r.pipe("y", 0)
    r.pipe("x", 11)
    r.out()
    r.pipe("y", 0)  # stream time 11: close = 0, end 0 is not < 0: accepted
    assert [(k, ts) for k, _, ts in r.out()] == [(_w("y", 0, 0), 0)]
    assert r.dropped("late") == 0
    r.pipe("x", 12)
    r.out()
    r.pipe("y", 0)  # close = 1: dropped
    assert r.out() == []
    assert r.dropped("late") == 1


def test_null_key_dropped_and_counted(run):
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(G)))
    r.input.pipe_input(None, "click", 5)
    assert r.out() == []
    assert r.dropped("null-key") == 1


def test_stream_time_is_per_processor_max(run):
    """close uses max(stream time, ts): an older record of another key is judged against it."""
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(10)))
    r.pipe("a", 100)
    r.pipe("b", 50)  # close = 100 - 10 = 90 > 50: late
    assert r.dropped("late") == 1


def test_on_window_close_example(run):
    """a@0, a@G+1, a@G+1, a@2G+2 x3 -> only ([0,0], 1)@0 then ([G+1,G+1], 2)@G+1, with the
    3 x gap retention of Kafka's own tests (see the default-retention test below)."""
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(G), EmitStrategy.on_window_close(),
                      retention=3 * G))
    outputs = []
    for ts in (0, G + 1, G + 1, 2 * G + 2, 2 * G + 2, 2 * G + 2):
        r.pipe("a", ts)
        outputs.append(r.out())
    assert outputs == [
        [],
        [(_w("a", 0, 0), 1, 0)],
        [],
        [(_w("a", G + 1, G + 1), 2, G + 1)],
        [],
        [],
    ]


def test_on_window_close_with_default_retention(run, store_type):
    """docs/semantics.md §4 says every closed session is forwarded once. Kafka Streams' default
    (RocksDB) store for emit-on-close is its time-ordered session store, whose by-end-time
    range query returns every session of a live segment, so it does emit here. With the
    default retention (gap + grace) a session closes exactly when it falls behind the
    store's read horizon (observed - retention + 1), so a store that applies that horizon
    to find_sessions_by_end never returns it. (Kafka's in-memory session store has that
    same gap; we follow the RocksDB behaviour, which is what docs/semantics.md describes.) Segment
    drops are the other way to lose them: see the segment-boundary tests below."""
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(G), EmitStrategy.on_window_close()))
    for ts in (0, G + 1, G + 1, 2 * G + 2):
        r.pipe("a", ts)
    assert r.out() == [(_w("a", 0, 0), 1, 0), (_w("a", G + 1, G + 1), 2, G + 1)]


def test_on_window_close_default_retention_stream_time_jump_across_segment_boundary(run):
    """Default retention (gap + grace = 10): segment interval 60000. The put of the record
    that moves stream time past a segment boundary drops that segment; the sessions in it
    (closed by that same record, some ending right before the boundary) are forwarded
    before the put, each once, in (end, key, start) order."""
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(10), EmitStrategy.on_window_close()))
    r.pipe("a", 59_990)
    r.pipe("b", 59_999)  # ends 1 ms before segment 1
    assert r.out() == []
    r.pipe("c", 60_010)  # close = 60000: closes [59990] and [59999]; the put drops segment 0
    assert r.out() == [(_w("a", 59_990, 59_990), 1, 59_990), (_w("b", 59_999, 59_999), 1, 59_999)]
    for key, ts in (("a", 61_000), ("b", 100_000), ("b", 100_005), ("a", 119_999)):
        r.pipe(key, ts)
    assert r.out() == [
        (_w("c", 60_010, 60_010), 1, 60_010),
        (_w("a", 61_000, 61_000), 1, 61_000),
        (_w("b", 100_000, 100_005), 2, 100_005),
    ]
    r.pipe("d", 500_000)  # a jump over several segments, [119999] among the dropped ones
    assert r.out() == [(_w("a", 119_999, 119_999), 1, 119_999)]
    r.pipe("d", 500_011)
    assert r.out() == [(_w("d", 500_000, 500_000), 1, 500_000)]


def test_on_window_close_throttle_never_lets_the_store_drop_unemitted_sessions(store_type):
    """The wall-clock throttle (Kafka's emit interval) still holds back closed sessions that
    stay in live segments, but not the ones the next put would drop."""
    topology = _topology(SessionWindows.of_inactivity_gap_and_grace(10, 5), EmitStrategy.on_window_close())
    with TopologyTestDriver(topology, store_type=store_type) as driver:
        topic = driver.create_input_topic("clicks", Serdes.string(), Serdes.string())
        out = driver.create_output_topic("counts", KEY_SERDE, Serdes.int64())

        def emitted():
            return [(r.key, r.value) for r in out.read_records_to_list()]

        topic.pipe_input("a", "c", 0)  # checks (nothing closed), next check at wall clock +1000
        topic.pipe_input("a", "c", 59_999)
        topic.pipe_input("b", "c", 60_000)
        assert emitted() == []  # [0,0] closed but throttled, as in Kafka
        topic.pipe_input("x", "c", 60_020)  # drops segment 0: [0,0] and [59999,59999] go first
        assert emitted() == [(_w("a", 0, 0), 1), (_w("a", 59_999, 59_999), 1)]
        topic.pipe_input("x", "c", 60_030)  # [60000] closed, segment 1 live: throttled
        assert emitted() == []
        driver.advance_wall_clock_time(1000)
        topic.pipe_input("x", "c", 60_031)
        assert emitted() == [(_w("b", 60_000, 60_000), 1)]
        topic.pipe_input("y", "c", 10_000_000)  # throttled again, but segments die: flushed
        assert emitted() == [(_w("x", 60_020, 60_031), 3)]
        topic.pipe_input("z", "c", 10_000_016)  # [10000000] closed, segment live: throttled
        assert emitted() == []


def test_on_window_close_never_emits_tombstones_or_updates(run):
    r = run(_topology(SessionWindows.of_inactivity_gap_with_no_grace(10), EmitStrategy.on_window_close(),
                      retention=100))
    for ts in (0, 5, 8):
        r.pipe("a", ts)
    assert r.out() == []
    r.pipe("b", 100)  # close = 90: [0, 8] closes
    assert r.out() == [(_w("a", 0, 8), 3, 8)]


def test_on_window_close_is_throttled_by_wall_clock_interval(store_type):
    """Kafka checks for closed windows at most every emit interval of wall-clock time
    (internal config, default 1000 ms); the driver's wall clock only moves when told."""
    topology = _topology(SessionWindows.of_inactivity_gap_with_no_grace(10), EmitStrategy.on_window_close(),
                         retention=1000)
    with TopologyTestDriver(topology, store_type=store_type) as driver:
        topic = driver.create_input_topic("clicks", Serdes.string(), Serdes.string())
        out = driver.create_output_topic("counts", KEY_SERDE, Serdes.int64())
        topic.pipe_input("a", "c", 0)  # first check happens (and schedules the next at +1000)
        topic.pipe_input("b", "c", 100)  # [0,0] closed, but throttled
        assert out.is_empty()
        driver.advance_wall_clock_time(1000)
        topic.pipe_input("b", "c", 101)
        assert [r.key for r in out.read_records_to_list()] == [_w("a", 0, 0)]


def test_session_windows_aggregate_and_reduce(store_type):
    builder = StreamsBuilder()
    grouped = builder.stream("clicks", Consumed.with_(Serdes.string(), Serdes.string())).group_by_key()
    windows = SessionWindows.of_inactivity_gap_with_no_grace(10)
    grouped.windowed_by(windows).aggregate(
        lambda: "", lambda k, v, agg: agg + v, lambda k, a, b: a + b,
        Materialized.as_("agg").with_value_serde(Serdes.string()).with_retention(100),
    ).to_stream().to("agg-out", Produced.with_(KEY_SERDE, Serdes.string()))
    grouped.windowed_by(windows).reduce(
        lambda a, v: a + "|" + v, Materialized.as_("red").with_value_serde(Serdes.string()).with_retention(100)
    ).to_stream().to("red-out", Produced.with_(KEY_SERDE, Serdes.string()))
    with TopologyTestDriver(builder.build(), store_type=store_type) as driver:
        topic = driver.create_input_topic("clicks", Serdes.string(), Serdes.string())
        topic.pipe_record_list([TestRecord("k", "x", 0), TestRecord("k", "y", 20), TestRecord("k", "z", 10)])
        agg = driver.create_output_topic("agg-out", KEY_SERDE, Serdes.string()).read_key_values_to_map()
        red = driver.create_output_topic("red-out", KEY_SERDE, Serdes.string()).read_key_values_to_map()
        # z@10 merges [0,0] and [20,20]: store order (by end) folds x first, then y
        assert agg == {_w("k", 0, 20): "xyz"}
        assert red == {_w("k", 0, 20): "x|y|z"}


def test_retention_shorter_than_gap_plus_grace_is_refused():
    builder = StreamsBuilder()
    with pytest.raises(TopologyError, match="retention"):
        builder.stream("in").group_by_key().windowed_by(
            SessionWindows.of_inactivity_gap_and_grace(100, 50)
        ).count(Materialized.as_("s").with_retention(120))


def test_session_changelog_records_use_store_key_layout(store_type):
    import struct

    topology = _topology(SessionWindows.of_inactivity_gap_with_no_grace(G))
    with TopologyTestDriver(topology, store_type=store_type) as driver:
        driver.create_input_topic("clicks", Serdes.string(), Serdes.string()).pipe_input("a", "c", 7)
        changelog = driver.create_output_topic("topology-test-driver-sessions-changelog", "bytes", "bytes")
        record = changelog.read_record()
        assert record.key == b"a" + struct.pack(">qq", 7, 7)
        assert Serdes.int64().deserialize(record.value) == 1
        assert record.timestamp == 7
