"""Session stores: docs/semantics.md §4 store-level behaviour and examples, RocksDB and in memory."""

from __future__ import annotations

import struct

import pytest

from airflow_stateful_provider.streams.errors import ConfigError, InvalidRecordError
from airflow_stateful_provider.streams.state import (
    RocksDBSessionStore,
    SessionKey,
    session_key_from_bytes,
    session_key_to_bytes,
    session_segment_interval,
)
from airflow_stateful_provider.streams.windows import SessionWindow, Windowed

G = 300_000
I64 = struct.Struct(">q")


def S(key, start, end):
    return SessionKey(key, start, end)


class CountAggregation:
    """docs/semantics.md §4's per-record algorithm (count, merger = sum) over a store, as the
    runtime's session aggregation runs it; records what it forwards."""

    def __init__(self, store, gap, grace=0, emit_on_close=False):
        self.store, self.gap, self.grace, self.emit_on_close = store, gap, grace, emit_on_close
        self.stream_time = -1
        self.last_close = -1
        self.forwarded = []

    def process(self, key, ts):
        store, gap = self.store, self.gap
        self.stream_time = max(self.stream_time, ts)
        close = self.stream_time - self.grace - gap
        candidates = store.find_sessions(key, ts - gap, ts + gap)
        start, end, count = ts, ts, 1
        for session, agg in candidates:
            start, end = min(start, session.start), max(end, session.end)
            count += I64.unpack(agg)[0]
        if end >= close:
            for session, _agg in candidates:
                if (session.start, session.end) != (ts, ts):
                    store.remove(session)
                    self._forward(session, None)
            store.put(S(key, start, end), I64.pack(count))
            self._forward(S(key, start, end), count)
        if self.emit_on_close and close > self.last_close and close - 1 >= 0:
            for session, agg in store.find_sessions_by_end(max(self.last_close, 0), close - 1):
                self.forwarded.append(((session.start, session.end), I64.unpack(agg)[0], session.end))
            self.last_close = close

    def _forward(self, session, count):
        if not self.emit_on_close:
            self.forwarded.append(((session.start, session.end), count, session.end))


# -- docs/semantics.md §4 examples (gap G, no grace, count, merger = sum) -------------------------------


def test_example_extend_session(make_session):
    agg = CountAggregation(make_session(G), G)
    agg.process(b"a", 0)
    agg.process(b"a", 5)
    assert agg.forwarded == [((0, 0), 1, 0), ((0, 0), None, 0), ((0, 5), 2, 5)]
    assert agg.store.fetch(b"a") == [(S(b"a", 0, 5), I64.pack(2))]


def test_example_same_timestamp_no_tombstone(make_session):
    agg = CountAggregation(make_session(G), G)
    agg.process(b"a", 0)
    agg.process(b"a", 0)
    assert agg.forwarded == [((0, 0), 1, 0), ((0, 0), 2, 0)]
    assert agg.store.fetch(b"a") == [(S(b"a", 0, 0), I64.pack(2))]


def test_example_record_between_two_sessions_merges_them(make_session):
    # Kafka's KStreamSessionWindowAggregateProcessorTest.shouldMergeSessions, where this example
    # comes from, builds the store with retention 3 x gap. With the DSL default (gap + grace = G)
    # [0,0] is already past the store's read cut-off (end < observed - retention + 1 = 2) at
    # stream time G+1 and would not be merged: see the next test.
    agg = CountAggregation(make_session(3 * G), G)
    agg.process(b"a", 0)
    agg.process(b"a", G + 1)
    assert [s for s, _ in agg.store.fetch(b"a")] == [S(b"a", 0, 0), S(b"a", G + 1, G + 1)]
    agg.forwarded.clear()
    agg.process(b"a", G // 2)
    assert agg.forwarded == [((0, 0), None, 0), ((G + 1, G + 1), None, G + 1), ((0, G + 1), 3, G + 1)]
    assert agg.store.fetch(b"a") == [(S(b"a", 0, G + 1), I64.pack(3))]


def test_with_retention_gap_plus_grace_old_sessions_are_past_the_read_cut_off(make_session):
    agg = CountAggregation(make_session(G), G)
    agg.process(b"a", 0)
    agg.process(b"a", G + 1)
    agg.forwarded.clear()
    agg.process(b"a", G // 2)
    assert agg.forwarded == [((G + 1, G + 1), None, G + 1), ((G // 2, G + 1), 2, G + 1)]


def test_example_late_record_dropped_without_grace(make_session):
    agg = CountAggregation(make_session(10), 10)
    for key, ts in [(b"x", 0), (b"y", 0), (b"x", 11)]:
        agg.process(key, ts)
    agg.forwarded.clear()
    agg.process(b"y", 0)  # close = 11 - 0 - 10 = 1 > end 0
    assert agg.forwarded == []
    assert agg.store.fetch(b"y") == []  # [0,0] of y is past retention (10) as well


def test_example_grace_accepts_then_drops(make_session):
    agg = CountAggregation(make_session(30), 10, grace=1)  # retention 3 x gap as in Kafka's tests
    for key, ts in [(b"x", 0), (b"y", 0), (b"x", 11)]:
        agg.process(key, ts)
    agg.forwarded.clear()
    agg.process(b"y", 0)  # close = 0: accepted
    assert agg.forwarded == [((0, 0), 2, 0)]
    agg.process(b"x", 12)
    agg.forwarded.clear()
    agg.process(b"y", 0)  # close = 1: dropped
    assert agg.forwarded == []


def test_grace_with_default_retention_restarts_the_count(make_session):
    # retention = gap + grace = 11: at stream time 11 y's [0,0] (end 0 < 11 - 11 + 1) is past
    # the read cut-off, so the accepted record starts a fresh [0,0] (Kafka behaves the same)
    agg = CountAggregation(make_session(11), 10, grace=1)
    for key, ts in [(b"x", 0), (b"y", 0), (b"x", 11)]:
        agg.process(key, ts)
    agg.forwarded.clear()
    agg.process(b"y", 0)
    assert agg.forwarded == [((0, 0), 1, 0)]


def test_example_emit_on_window_close(make_session):
    agg = CountAggregation(make_session(G), G, emit_on_close=True)
    for ts in [0, G + 1, G + 1, 2 * G + 2, 2 * G + 2, 2 * G + 2]:
        agg.process(b"a", ts)
    assert agg.forwarded == [((0, 0), 1, 0), ((G + 1, G + 1), 2, G + 1)]


# -- store-level behaviour ---------------------------------------------------------------------


def test_key_layout_is_key_end_start_big_endian():
    assert session_key_to_bytes(S(b"ab", 1, 2)) == b"ab" + (2).to_bytes(8, "big") + (1).to_bytes(8, "big")
    assert session_key_from_bytes(b"ab" + (2).to_bytes(8, "big") + (1).to_bytes(8, "big")) == S(b"ab", 1, 2)
    with pytest.raises(InvalidRecordError, match="at least 16 bytes, got 3"):
        session_key_from_bytes(b"abc")


def test_rocksdb_row_key_is_segment_prefix_plus_session_key(tmp_path):
    store = RocksDBSessionStore(tmp_path / "s", G)
    store.put(S(b"k", 10, 200_000), b"agg")
    segment = 200_000 // 150_000
    row = b"\x02" + segment.to_bytes(8, "big") + session_key_to_bytes(S(b"k", 10, 200_000))
    assert store._db.get(row) == b"agg"
    store.close()


def test_segment_interval():
    assert session_segment_interval(G) == 150_000
    assert session_segment_interval(10) == 60_000
    assert session_segment_interval(10 * G) == 1_500_000


def test_find_sessions_candidates(make_session):
    store = make_session(G)
    for start, end in [(0, 10), (20, 30), (40, 50), (60, 70)]:
        store.put(S(b"k", start, end), b"%d" % start)
    store.put(S(b"k2", 20, 30), b"other key")
    # end >= 30 and start <= 45: [20,30] and [40,50], in (end, start) order
    assert [s for s, _ in store.find_sessions(b"k", 30, 45)] == [S(b"k", 20, 30), S(b"k", 40, 50)]
    assert [s for s, _ in store.backward_find_sessions(b"k", 30, 45)] == [S(b"k", 40, 50), S(b"k", 20, 30)]
    # a gap of exactly `gap` merges: a record at 80 with gap 10 finds [60,70]
    assert [s for s, _ in store.find_sessions(b"k", 80 - 10, 80 + 10)] == [S(b"k", 60, 70)]
    assert store.find_sessions(b"k", 71, 100) == []
    assert store.fetch_session(b"k", 20, 30) == b"20"
    assert store.fetch_session(b"k", 20, 31) is None
    assert [s for s, _ in store.fetch(b"k2")] == [S(b"k2", 20, 30)]


def test_keys_that_are_prefixes_of_each_other_stay_apart(make_session):
    store = make_session(G)
    keys = [b"", b"a", b"a\x00", b"a\x00\x00", b"ab", b"a" + b"\x00" * 16]
    for i, key in enumerate(keys):
        store.put(S(key, i, 100 + i), bytes([i]))
    for i, key in enumerate(keys):
        assert store.fetch(key) == [(S(key, i, 100 + i), bytes([i]))]
        assert store.find_sessions(key, 0, 1000) == [(S(key, i, 100 + i), bytes([i]))]


def test_sessions_across_segments_come_back_in_end_order(make_session):
    store = make_session(G)
    ends = [400_000, 10, 160_000, 300_001]
    for end in ends:
        store.put(S(b"k", end, end), b"x")
    assert [s.end for s, _ in store.fetch(b"k")] == [160_000, 300_001, 400_000]  # 10 expired


def test_writes_into_dead_segments_are_dropped(make_session):
    store = make_session(G)  # interval 150000
    store.put(S(b"k", 500_000, 500_000), b"new")  # min live segment (500000-300000)//150000 = 1
    store.put(S(b"k", 100, 149_999), b"dead")  # segment 0: dropped
    store.put(S(b"k", 150_000, 150_000), b"live but invisible")  # segment 1 is live
    assert store.dropped_writes == 1
    assert store.fetch_session(b"k", 100, 149_999) is None
    # stored, but reads hide sessions with end < observed - retention + 1 = 200001
    assert store.fetch_session(b"k", 150_000, 150_000) is None
    assert [s.end for s, _ in store.fetch(b"k")] == [500_000]
    assert [s.segment_id for s in store.stats().live_segments] == [1, 3]


def test_segments_are_dropped_whole_as_stream_time_advances(make_session):
    store = make_session(G)
    store.put(S(b"a", 0, 0), b"0")
    store.put(S(b"b", 149_999, 149_999), b"1")
    store.put(S(b"c", 150_000, 150_000), b"2")
    assert [s.segment_id for s in store.stats().live_segments] == [0, 1]
    store.put(S(b"d", 449_999, 449_999), b"3")  # min live (449999-300000)//150000 = 0
    assert [s.segment_id for s in store.stats().live_segments] == [0, 1, 2]
    store.put(S(b"d", 450_000, 450_000), b"4")  # min live 1: segment 0 goes
    assert [s.segment_id for s in store.stats().live_segments] == [1, 2, 3]
    assert store.stats().observed_stream_time == 450_000


def test_remove_advances_observed_stream_time(make_session):
    store = make_session(G)
    store.remove(S(b"k", 0, 1_000_000))
    assert store.observed_stream_time == 1_000_000
    store.put(S(b"k", 0, 10), b"x")
    assert store.fetch(b"k") == []


def test_put_none_removes(make_session):
    store = make_session(G)
    store.put(S(b"k", 1, 2), b"x")
    store.put(S(b"k", 1, 2), None)
    assert store.fetch(b"k") == []


def test_find_sessions_by_end_spans_keys(make_session):
    store = make_session(G)
    store.put(S(b"b", 0, 5), b"1")
    store.put(S(b"a", 3, 5), b"2")
    store.put(S(b"a", 0, 4), b"3")
    store.put(S(b"c", 9, 9), b"4")
    assert [s for s, _ in store.find_sessions_by_end(4, 5)] == [S(b"a", 0, 4), S(b"a", 3, 5), S(b"b", 0, 5)]
    assert store.find_sessions_by_end(6, 8) == []


def test_accepts_windowed_keys_from_windows_module(make_session):
    store = make_session(G)
    store.put(Windowed(b"k", SessionWindow(1, 2)), b"x")
    assert store.fetch_session(b"k", 1, 2) == b"x"
    store.remove(Windowed(b"k", SessionWindow(1, 2)))
    assert store.fetch(b"k") == []


def test_all_returns_unexpired_sessions(make_session):
    store = make_session(G)
    store.put(S(b"b", 0, 5), b"1")
    store.put(S(b"a", 3, 5), b"2")
    assert sorted(s for s, _ in store.all()) == [S(b"a", 3, 5), S(b"b", 0, 5)]


@pytest.mark.parametrize(
    "windowed, agg, match",
    [
        (S(None, 0, 1), b"x", "session key cannot be null"),
        (S("k", 0, 1), b"x", "keys must be bytes, got str"),
        (S(b"k", -1, 1), b"x", r"0 <= start <= end.*\[-1, 1\]"),
        (S(b"k", 5, 1), b"x", r"0 <= start <= end.*\[5, 1\]"),
        (S(b"k", 0, 1.5), b"x", r"0 <= start <= end"),
        (S(b"k", 0, 2**63), b"x", r"end < 2\*\*63"),
        (S(b"k", 0, 1), "agg", "aggregates must be bytes or None, got str"),
        ("not a session", b"x", "expected a SessionKey"),
    ],
)
def test_bad_input(make_session, windowed, agg, match):
    store = make_session(G)
    with pytest.raises(InvalidRecordError, match=match):
        store.put(windowed, agg)
    assert store.observed_stream_time == -1


def test_bad_retention(tmp_path):
    with pytest.raises(ConfigError, match="retention must be > 0 ms, got 0 ms"):
        RocksDBSessionStore(tmp_path / "s", 0)
    with pytest.raises(ConfigError, match="got -5 ms"):
        RocksDBSessionStore(tmp_path / "s", -5)
    with pytest.raises(ConfigError, match="inactivity_gap must be >= 1 ms, got 0 ms"):
        RocksDBSessionStore(tmp_path / "s", inactivity_gap=0)
    with pytest.raises(ConfigError, match="needs a retention"):
        RocksDBSessionStore(tmp_path / "s")
    assert list(tmp_path.iterdir()) == []


def test_retention_defaults_to_gap_plus_grace(tmp_path):
    store = RocksDBSessionStore(tmp_path / "s", inactivity_gap=300_000, grace_period=60_000)
    assert store.retention_ms == 360_000
    assert store.metadata.setting("inactivity_gap_ms") == 300_000
    assert store.metadata.setting("grace_period_ms") == 60_000
    store.close()


def test_observed_stream_time_survives_reopen(tmp_path):
    store = RocksDBSessionStore(tmp_path / "s", G)
    store.put(S(b"k", 0, 700_000), b"x")
    store.close()
    store = RocksDBSessionStore(tmp_path / "s", G)
    assert store.observed_stream_time == 700_000
    store.put(S(b"k", 0, 10), b"late")
    assert store.dropped_writes == 1
    assert store.fetch(b"k") == [(S(b"k", 0, 700_000), b"x")]
    store.close()


def test_enforce_retention_with_stalled_stream_time(tmp_path):
    store = RocksDBSessionStore(tmp_path / "s", G)
    for i in range(200):
        store.put(S(b"key-%d" % i, 0, 1000), b"x" * 100)
    store.put(S(b"k", 200_000, 200_000), b"y")
    result = store.enforce_retention(1_000_000)
    assert [s.segment_id for s in result.segments_dropped] == [0, 1]
    assert result.observed_stream_time_before == 200_000
    assert result.observed_stream_time_after == 1_000_000
    assert result.min_live_segment == (1_000_000 - G) // 150_000
    assert store.stats().live_segments == ()
    assert store.fetch(b"k") == []
    assert result.as_dict()["segments_dropped"][0] == {"segment_id": 0, "start_ms": 0, "end_ms": 149_999}
    store.close()


def test_query_bounds_must_be_ints(make_session):
    store = make_session(G)
    with pytest.raises(InvalidRecordError, match="time bounds must be int ms, got float 1.5"):
        store.find_sessions(b"k", 1.5, 10)
    with pytest.raises(InvalidRecordError, match="got NoneType None"):
        store.fetch_session(b"k", None, 10)
    with pytest.raises(InvalidRecordError, match="got str 'x'"):
        store.find_sessions_by_end(0, "x")


def test_stores_satisfy_the_protocol(make_session):
    from airflow_stateful_provider.streams.state import SessionStore

    assert isinstance(make_session(G), SessionStore)
