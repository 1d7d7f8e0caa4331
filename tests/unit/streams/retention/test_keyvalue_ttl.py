"""Key-value time to live (``Materialized.with_time_to_live``) through the TopologyTestDriver:
expiry by stream time with a delete downstream and a changelog tombstone, records that
arrive expired dropped as ``expired``, expiry by a maintenance run's ``now`` (stalled
partition), and a store restored from the changelog that answers the same
(docs/maintenance.md, "Key-value TTL")."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.testing import TopologyTestDriver
from airflow_stateful_provider.streams.windows import SessionWindows

S = Serdes.string()
MIN = 60_000
TTL = 60 * MIN
T = 1_700_000_000_000
DAY = 86_400_000


def topology():
    builder = StreamsBuilder()
    table = builder.table("profiles", Consumed.with_(S, S), Materialized.as_("profiles").with_time_to_live(TTL))
    table.to_stream().to("profiles-out", Produced.with_(S, S))
    (builder.stream("clicks", Consumed.with_(S, S)).group_by_key()
     .count(Materialized.as_("click-counts").with_time_to_live(TTL))
     .to_stream().to("counts", Produced.with_(S, Serdes.int64())))
    return builder.build()


class Instance:
    def __init__(self, store_type, changelogs=None):
        self.driver = TopologyTestDriver(topology(), store_type=store_type, changelogs=changelogs)
        self.profiles = self.driver.create_input_topic("profiles", S, S)
        self.clicks = self.driver.create_input_topic("clicks", S, S)
        self.out = self.driver.create_output_topic("profiles-out", S, S)
        self.counts = self.driver.create_output_topic("counts", S, Serdes.int64())

    def table(self):
        return sorted((kv.key, kv.value) for kv in self.driver.get_key_value_store("profiles").all())

    def output(self):
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]

    def expired(self):
        return self.driver.metrics().get("dropped-records-total:expired", 0)


def test_a_key_not_updated_for_the_ttl_is_deleted_with_a_delete_downstream_and_a_tombstone(instances):
    a = instances()
    a.profiles.pipe_input("k1", "v1", T)
    a.profiles.pipe_input("k2", "v2", T + 10 * MIN)
    assert a.output() == [("k1", "v1", T), ("k2", "v2", T + 10 * MIN)]
    a.profiles.pipe_input("k3", "v3", T + 61 * MIN)  # k1's stamp + TTL = T + 60 min has passed
    assert a.output() == [("k1", None, T + TTL), ("k3", "v3", T + 61 * MIN)]
    assert a.table() == [("k2", "v2"), ("k3", "v3")]
    changelog = a.driver.changelog_records("profiles")
    assert [(r.key, r.value) for r in changelog if r.value is None] == [(b"k1", None)]
    # an update keeps a key alive: k2 rewritten at T + 65 min lives until T + 125 min
    a.profiles.pipe_input("k2", "v2b", T + 65 * MIN)
    a.profiles.pipe_input("k3", "v3b", T + 124 * MIN)
    assert a.table() == [("k2", "v2b"), ("k3", "v3b")]
    a.output()
    a.profiles.pipe_input("k3", "v3c", T + 125 * MIN)
    assert a.output() == [("k2", None, T + 125 * MIN), ("k3", "v3c", T + 125 * MIN)]


def test_records_that_arrive_expired_are_dropped_and_late_ones_within_the_ttl_are_kept(instances):
    a = instances()
    a.profiles.pipe_input("k1", "v1", T + 2 * TTL)
    a.profiles.pipe_input("k2", "old", T + TTL - 1)  # + TTL <= stream time: expired on arrival
    a.profiles.pipe_input("k3", "late", T + TTL + 1)  # within the TTL: kept
    assert a.expired() == 1
    assert a.table() == [("k1", "v1"), ("k3", "late")]


def test_aggregations_start_over_after_expiry(instances):
    a = instances()
    for ts in (T, T + MIN):
        a.clicks.pipe_input("u", "click", ts)
    a.clicks.pipe_input("u", "click", T + MIN + TTL)  # the count of u expired at T + 61 min
    assert [(r.key, r.value) for r in a.counts.read_records_to_list()] == [("u", 1), ("u", 2), ("u", None), ("u", 1)]


def test_maintenance_expires_a_stalled_partition_and_a_restored_instance_agrees(instances):
    a = instances()
    a.profiles.pipe_input("k1", "v1", T)
    a.profiles.pipe_input("k2", "v2", T + 10 * MIN)
    a.output()
    rows = {row["store"]: row["result"] for row in a.driver.enforce_retention(T + 3 * DAY)}
    ttl = rows["profiles"]
    assert [ttl["rows_dropped"], ttl["changelog_records_written"], ttl["cutoff_ms"]] == [2, 3, T + 3 * DAY]
    assert ttl["observed_stream_time_before"] == T + 10 * MIN and ttl["observed_stream_time_after"] == T + 3 * DAY
    assert a.output() == [("k1", None, T + TTL), ("k2", None, T + 10 * MIN + TTL)]
    assert a.table() == []
    b = instances(changelogs={name: a.driver.changelog_records(name) for name in ("profiles", "click-counts")})
    assert b.table() == []
    for instance in (a, b):
        instance.profiles.pipe_input("k1", "late", T + MIN)
        assert instance.expired() == 1 and instance.table() == [] and instance.output() == []
        instance.profiles.pipe_input("k9", "fresh", T + 3 * DAY + 1)
        assert instance.table() == [("k9", "fresh")]
    assert a.driver.changelog_records("profiles")[-1] == b.driver.changelog_records("profiles")[-1]


def test_a_time_to_live_is_refused_on_session_stores():
    builder = StreamsBuilder()
    with pytest.raises(TopologyError, match="time to live is for key-value stores"):
        (builder.stream("clicks", Consumed.with_(S, S)).group_by_key()
         .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(MIN))
         .count(Materialized.as_("s").with_time_to_live(TTL)))


def test_a_restored_store_keeps_stream_time_when_the_newest_key_was_deleted(instances):
    """Stream time came from k1's write; k1 is deleted. A restored store must still judge a
    record at (that time - TTL) expired, as the original does (the clock row)."""
    a = instances()
    a.profiles.pipe_input("k2", "v2", T)
    a.profiles.pipe_input("k1", "v1", T + 30 * MIN)
    a.profiles.pipe_input("k1", None, T + 30 * MIN)
    b = instances(changelogs={name: a.driver.changelog_records(name) for name in ("profiles", "click-counts")})
    for instance in (a, b):
        instance.profiles.pipe_input("k3", "old", T + 30 * MIN - TTL)
        assert instance.expired() == 1
        assert instance.table() == [("k2", "v2")]


def test_rows_restored_underneath_a_ttl_store_that_was_already_read_move_its_clock():
    """A standby's store read by a query, then restored further: the layer rebuilds its clock
    and expiry queue from the rows (the task's state manager invalidates it after each batch)."""
    import struct

    from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
    from airflow_stateful_provider.streams.state.keyvalue.in_memory import InMemoryKeyValueStore
    from airflow_stateful_provider.streams.state.keyvalue.ttl import TimeToLiveKeyValueStore

    raw = InMemoryKeyValueStore("kv")
    ttl = TimeToLiveKeyValueStore(raw, TTL, lambda: 0)
    stamp = struct.Struct(">q").pack
    raw.restore_batch([ChangelogRecord(b"old", stamp(T) + b"1", T, 0)])
    assert ttl.get(b"old") == b"1" and ttl.observed_stream_time == T
    raw.restore_batch([ChangelogRecord(b"new", stamp(T + TTL) + b"2", T + TTL, 1)])
    ttl.invalidate()
    assert ttl.observed_stream_time == T + TTL
    assert ttl.get(b"old") is None and ttl.get(b"new") == b"2"
