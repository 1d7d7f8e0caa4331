"""Issue 34's scenario through the TopologyTestDriver: a session count (gap 5 minutes, no
grace) on a partition quiet for three days, ``enforce_retention`` at now, then a late
record one minute after the dropped session. Oracle (docs/semantics.md §4, docs/maintenance.md
"The cut-off"): without maintenance the record merges (count 2); after maintenance it is
dropped as expired (reason ``expired``), on the maintained instance and on one restored from
the changelog alike, and both hold the same store."""

from __future__ import annotations

import struct

import pytest

from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.errors import InvalidRecordError
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.cutoff import SESSION_CUTOFF_KEY, decode_cutoff
from airflow_stateful_provider.streams.testing import TopologyTestDriver
from airflow_stateful_provider.streams.windows import SessionWindow, SessionWindowedSerde, SessionWindows, Windowed

GAP = 5 * 60_000
DAY = 86_400_000
T = 1_700_000_000_000  # the quiet partition's last record
NOW = T + 3 * DAY  # when maintenance runs
LATE = T + 60_000  # one minute after the dropped session
KEY_SERDE = SessionWindowedSerde(Serdes.string())


def session_count_topology():
    builder = StreamsBuilder()
    (builder.stream("clicks", Consumed.with_(Serdes.string(), Serdes.string()))
     .group_by_key().windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(GAP))
     .count(Materialized.as_("sessions"))
     .to_stream().to("counts", Produced.with_(KEY_SERDE, Serdes.int64())))
    return builder.build()


def session_key(key, start, end):
    """A session changelog record's key: key | end | start (8 bytes big-endian each)."""
    return key.encode() + struct.pack(">qq", end, start)


class Instance:
    def __init__(self, store_type, changelogs=None):
        self.driver = TopologyTestDriver(session_count_topology(), store_type=store_type, changelogs=changelogs)
        self.input = self.driver.create_input_topic("clicks", Serdes.string(), Serdes.string())
        self.output = self.driver.create_output_topic("counts", KEY_SERDE, Serdes.int64())

    def pipe(self, key, ts):
        self.input.pipe_input(key, "click", ts)

    def out(self):
        return [(r.key, r.value, r.timestamp) for r in self.output.read_records_to_list()]

    def sessions(self):
        return [(w.key, w.window.start, w.window.end, v) for w, v in self.driver.get_session_store("sessions").all()]

    def dropped(self, reason):
        return self.driver.metrics().get(f"dropped-records-total:{reason}", 0)


def test_without_maintenance_the_late_record_merges(instances):
    a = instances()
    a.pipe("a", T)
    a.pipe("b", T)
    a.out()
    a.pipe("a", LATE)
    assert a.out()[-1] == (Windowed("a", SessionWindow(T, LATE)), 2, LATE)
    assert a.dropped("expired") == 0


def test_after_maintenance_the_late_record_is_dropped_as_expired_here_and_on_a_restored_instance(instances):
    a = instances()
    a.pipe("a", T)
    a.pipe("b", T)
    assert len(a.out()) == 2
    rows = a.driver.enforce_retention(NOW)
    result = rows[0]["result"]
    # a tombstone for each dropped session, then the marker
    assert [len(result["segments_dropped"]), result["changelog_records_written"], result["cutoff_ms"]] == [1, 3, NOW]
    assert result["rows_dropped"] == 2  # the sessions of a and b
    assert [result["segments_before"], result["segments_after"]] == [1, 0]
    assert result["observed_stream_time_after"] == NOW
    assert a.sessions() == []
    changelog = a.driver.changelog_records("sessions")
    assert sorted((r.key, r.value) for r in changelog[-3:-1]) == [(session_key("a", T, T), None),
                                                                   (session_key("b", T, T), None)]
    assert changelog[-1].key == SESSION_CUTOFF_KEY and decode_cutoff(changelog[-1]) == NOW

    # a new instance on a wiped disk restores the changelog, marker included
    b = instances(changelogs={"sessions": changelog})
    assert b.sessions() == [] == a.sessions()
    assert b.driver.get_session_store("sessions").observed_stream_time == NOW

    for instance in (a, b):
        instance.pipe("a", LATE)
        assert instance.out() == []
        assert instance.dropped("expired") == 1
        assert instance.dropped("late") == 0
        assert instance.sessions() == []
    # a record after the cut-off opens a session on both, with the same output
    for instance in (a, b):
        instance.pipe("a", NOW + 1)
        assert instance.out() == [(Windowed("a", SessionWindow(NOW + 1, NOW + 1)), 1, NOW + 1)]
    assert a.sessions() == b.sessions()


def test_maintenance_again_at_the_same_now_writes_nothing_more(instances):
    a = instances()
    a.pipe("a", T)
    a.driver.enforce_retention(NOW)
    again = a.driver.enforce_retention(NOW)[0]["result"]
    assert again["segments_dropped"] == () and again["changelog_records_written"] == 0
    assert [r.key for r in a.driver.changelog_records("sessions")].count(SESSION_CUTOFF_KEY) == 1


def test_the_marker_is_applied_where_it_stands_in_the_changelog(instances):
    """Records written after the marker (a session after the cut-off) are restored; those
    before it are dropped with the segments the cut-off expires, in the same batch."""
    a = instances()
    a.pipe("a", T)
    a.driver.enforce_retention(NOW)
    a.pipe("c", NOW + 10)
    b = instances(changelogs={"sessions": a.driver.changelog_records("sessions")})
    assert b.sessions() == a.sessions() == [("c", NOW + 10, NOW + 10, 1)]


def test_a_marker_of_a_newer_format_is_refused_not_guessed(instances):
    newer = ChangelogRecord(SESSION_CUTOFF_KEY, b'{"marker":"retention-cutoff","format_version":2,"cutoff_ms":5}',
                            5, 0)
    with pytest.raises(InvalidRecordError, match="format_version 2, newer"):
        instances(changelogs={"sessions": [newer]})


def test_the_processors_find_the_byte_store_under_any_wrapper():
    from airflow_stateful_provider.streams.state.common.segments import segment_clock
    from airflow_stateful_provider.streams.state.session.in_memory import InMemorySessionStore

    class Slotted:
        __slots__ = ("inner",)

        def __init__(self, inner):
            self.inner = inner

    raw = InMemorySessionStore(GAP)
    assert segment_clock(Slotted(Slotted(raw))) is raw
    assert segment_clock(Slotted(object())) is None
