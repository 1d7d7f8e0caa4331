"""Tombstones for what a maintenance run drops (docs/maintenance.md, "Tombstones").

Oracle: the changelog after the run, and the same changelog as a compacted topic keeps it
(the newest record per key, tombstones gone once ``delete.retention.ms`` passed). The
compacted changelog must hold nothing of the dropped data, and an instance restored from it
must hold the maintained store and drop the same late records. Copies that are not the
running active task (standbys, restoring tasks) apply the run without writing anything.
"""

from __future__ import annotations

import struct

from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.state import ChangeloggingKeyValueStore, ChangelogRecord
from airflow_stateful_provider.streams.state.common.cutoff import SESSION_CUTOFF_KEY, VERSIONED_CUTOFF_KEY
from airflow_stateful_provider.streams.state.keyvalue.in_memory import InMemoryKeyValueStore
from airflow_stateful_provider.streams.state.keyvalue.ttl import TTL_CUTOFF_KEY, TimeToLiveKeyValueStore
from airflow_stateful_provider.streams.testing import TopologyTestDriver
from airflow_stateful_provider.streams.windows import SessionWindowedSerde, SessionWindows

S = Serdes.string()
GAP = 5 * 60_000
HOUR = 3_600_000
DAY = 86_400_000
TTL = HOUR
T = 1_700_000_000_000
NOW = T + 3 * DAY
STORES = ("sessions", "rates-store", "profiles")


def topology():
    builder = StreamsBuilder()
    (builder.stream("clicks", Consumed.with_(S, S)).group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(GAP))
     .count(Materialized.as_("sessions")).to_stream()
     .to("counts", Produced.with_(SessionWindowedSerde(S), Serdes.int64())))
    builder.table("rates", Consumed.with_(S, S), Materialized.as_versioned("rates-store", history_retention=HOUR))
    builder.table("profiles", Consumed.with_(S, S), Materialized.as_("profiles").with_time_to_live(TTL))
    return builder.build()


def compacted(records):
    """What a compacted topic keeps once the cleaner ran past ``delete.retention.ms``: the
    newest record of each key, in log order, no tombstones."""
    newest = {r.key: at for at, r in enumerate(records)}
    return [r for at, r in enumerate(records) if newest[r.key] == at and r.value is not None]


def session_key(key, start, end):
    return key.encode() + struct.pack(">qq", end, start)


class Instance:
    def __init__(self, store_type, changelogs=None):
        self.driver = TopologyTestDriver(topology(), store_type=store_type, changelogs=changelogs)
        self.inputs = {t: self.driver.create_input_topic(t, S, S) for t in ("clicks", "rates", "profiles")}

    def pipe(self, topic, key, ts, value="v"):
        self.inputs[topic].pipe_input(key, value, ts)

    def changelogs(self):
        return {name: self.driver.changelog_records(name) for name in STORES}

    def state(self):
        d = self.driver
        versioned = d.get_versioned_key_value_store("rates-store")
        return {"sessions": sorted((w.key, w.window.start, w.window.end, v)
                                   for w, v in d.get_session_store("sessions").all()),
                "rates": [(v.value, v.timestamp) for v in (versioned.get("r", t) for t in (T, T + 10, NOW))
                          if v is not None],
                "profiles": sorted((kv.key, kv.value) for kv in d.get_key_value_store("profiles").all()),
                "expired": d.metrics().get("dropped-records-total:expired", 0)}


def stale_instance(instances):
    """Sessions of a and b, two versions of r and two profiles, all quiet for three days."""
    a = instances()
    a.pipe("clicks", "a", T)
    a.pipe("clicks", "a", T + 60_000)
    a.pipe("clicks", "b", T)
    a.pipe("rates", "r", T, "r0")
    a.pipe("rates", "r", T + 10, "r1")
    a.pipe("profiles", "p1", T)
    a.pipe("profiles", "p2", T + 1)
    return a


def test_the_run_logs_a_tombstone_per_dropped_session_and_key_and_the_compacted_changelog_holds_only_live_data(
        instances):
    a = stale_instance(instances)
    before = {name: len(records) for name, records in a.changelogs().items()}
    results = {row["store"]: row["result"] for row in a.driver.enforce_retention(NOW)}
    a.pipe("clicks", "c", NOW + 1)  # live data written after the run
    after = a.changelogs()
    written = {name: after[name][before[name]:] for name in STORES}
    # sessions: one tombstone per dropped session, then the marker, then the new session
    assert [(r.key, r.value) for r in written["sessions"][:2]] == [(session_key("a", T, T + 60_000), None),
                                                                   (session_key("b", T, T), None)]
    assert [r.key for r in written["sessions"][2:]] == [SESSION_CUTOFF_KEY, session_key("c", NOW + 1, NOW + 1)]
    assert results["sessions"]["changelog_records_written"] == 3
    # key-value TTL: the marker row, then a tombstone per expired key
    assert [(r.key, r.value) for r in written["profiles"][1:]] == [(b"p1", None), (b"p2", None)]
    assert written["profiles"][0].key == TTL_CUTOFF_KEY
    # versioned: the marker only; the version it dropped (r0) has a newer record of its key
    assert [r.key for r in written["rates-store"]] == [VERSIONED_CUTOFF_KEY]
    # compacted: nothing of what was dropped survives
    assert [r.key for r in compacted(after["sessions"])] == [SESSION_CUTOFF_KEY, session_key("c", NOW + 1, NOW + 1)]
    assert [r.key for r in compacted(after["profiles"])] == [TTL_CUTOFF_KEY]
    assert [r.key for r in compacted(after["rates-store"])] == [b"r", VERSIONED_CUTOFF_KEY]


def test_an_instance_restored_from_the_compacted_changelog_answers_like_the_maintained_one(instances):
    a = stale_instance(instances)
    a.driver.enforce_retention(NOW)
    b = instances({name: compacted(records) for name, records in a.changelogs().items()})
    c = instances(a.changelogs())  # the full changelog, before the broker compacts it
    assert b.state() == a.state() == c.state()
    for instance in (a, b, c):  # late records for what was dropped: expired everywhere
        instance.pipe("clicks", "a", T + 2 * 60_000)
        instance.pipe("profiles", "p1", T + 5)
        instance.pipe("rates", "r", T + 20, "late")
    assert b.state() == a.state() == c.state()
    assert a.state()["expired"] == 3 and a.state()["sessions"] == [] and a.state()["profiles"] == []


def test_copies_that_are_not_the_running_active_apply_the_run_and_write_nothing(instances):
    """A standby or a restoring active gets the command with write_cutoff False (the control
    listener): it drops the same rows locally, and its changelog gets nothing."""
    a = stale_instance(instances)
    b = stale_instance(instances)
    before = b.changelogs()
    for task in b.driver.tasks:
        for entry in task.stores.entries():
            if entry.name in STORES:
                result = task.stores.enforce_retention(entry.name, NOW, write_cutoff=False)
                assert result.get("changelog_records_written", 0) == 0
    assert b.changelogs() == before
    a.driver.enforce_retention(NOW)
    assert b.state()["sessions"] == a.state()["sessions"] == []
    assert b.state()["rates"] == a.state()["rates"]


def test_reads_of_a_ttl_store_never_write_only_the_active_run_does():
    """A standby restored up to a maintenance run's marker but not yet its tombstones holds
    rows its clock calls expired: queries must not see them, and must not delete them (that
    would log tombstones from a standby)."""
    logged = []

    class Writer:
        def send(self, key, value, timestamp):
            logged.append((key, value))

    stamp = struct.Struct(">q").pack
    raw = InMemoryKeyValueStore("kv")
    standby = TimeToLiveKeyValueStore(ChangeloggingKeyValueStore(raw, Writer(), lambda: NOW), TTL, lambda: NOW)
    marker = TimeToLiveKeyValueStore(InMemoryKeyValueStore("m"), TTL, lambda: 0)
    marker.enforce_retention(NOW)
    raw.restore_batch([ChangelogRecord(b"k", stamp(T) + b"v", T, 0),
                       ChangelogRecord(TTL_CUTOFF_KEY, marker.inner.get(TTL_CUTOFF_KEY), T, 1)])
    standby.invalidate()
    assert standby.get(b"k") is None and list(standby.all()) == []
    assert logged == [] and raw.get(b"k") is not None
    # the same layer on the active task: its maintenance run deletes and logs the tombstone
    result = standby.enforce_retention(NOW)
    assert logged == [(b"k", None)] and result.rows_dropped == 1 and raw.get(b"k") is None
