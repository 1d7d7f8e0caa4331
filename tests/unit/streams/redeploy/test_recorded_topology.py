"""RecordedTopology: what a topology records for the next deploy, and the versioned JSON a
later provider must still read."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from airflow_stateful_provider.streams import Serdes, Stores, TopologyRecordFormatError
from airflow_stateful_provider.streams.redeploy.recorded_topology import FORMAT_VERSION, RecordedTopology
from tests.unit.streams.redeploy.topologies import APP, described, store_topology


def every_kind():
    return store_topology(
        Stores.key_value_store_builder(Stores.in_memory_key_value_store("counts"), Serdes.string(), Serdes.int64()),
        Stores.session_store_builder(Stores.persistent_session_store("visits", timedelta(hours=1)), "string", "json"),
        Stores.versioned_key_value_store_builder(
            Stores.persistent_versioned_key_value_store("rates", timedelta(minutes=10)), "string", "json")
        .with_logging_disabled())


def test_each_store_records_its_kind_serdes_changelog_partitions_and_time_settings():
    recorded = described(every_kind(), partitions=3)
    assert recorded.application_id == APP and recorded.format_version == FORMAT_VERSION
    counts, rates, visits = recorded.stores
    assert (counts.name, counts.kind, counts.persistent, counts.key_serde, counts.value_serde) == (
        "counts", "key_value", False, "string", "int64")
    assert (counts.changelog_topic, counts.partitions, counts.subtopology, counts.window_type) == (
        f"{APP}-counts-changelog", 3, 0, None)
    assert dict(counts.settings) == {"time_to_live_ms": None} and counts.fixed_settings == ()
    assert (visits.kind, visits.window_type, visits.fixed_settings) == (
        "session", "session", ("retention_ms", "segment_interval_ms"))
    assert dict(visits.settings) == {"retention_ms": 3_600_000, "segment_interval_ms": 1_800_000,
                                     "inactivity_gap_ms": None, "grace_period_ms": None}
    assert (rates.kind, rates.changelog_topic, rates.fixed_settings) == (
        "versioned", None, ("history_retention_ms", "segment_interval_ms"))
    assert dict(rates.settings) == {"history_retention_ms": 600_000, "segment_interval_ms": 60_000}
    assert [(t.topic, t.partitions, t.key_serde, t.value_serde) for t in recorded.sources] == [
        ("orders", 3, "bytes", "bytes")]
    assert [(t.topic, t.partitions) for t in recorded.sinks] == [("totals", 1)]
    assert recorded.repartition_topics == ()


def test_json_round_trip():
    recorded = described(every_kind())
    assert RecordedTopology.from_json(recorded.to_json()) == recorded


def test_a_field_a_later_version_adds_is_ignored():
    document = json.loads(described(every_kind()).to_json())
    document["owner_team"] = "payments"
    document["stores"][0]["tiered"] = True
    assert RecordedTopology.from_json(json.dumps(document)) == described(every_kind())


def test_a_newer_format_version_is_refused_naming_both_versions():
    document = json.loads(described(every_kind()).to_json())
    document.update(format_version=FORMAT_VERSION + 1, recorded_by="airflow-stateful-provider 9.0")
    with pytest.raises(TopologyRecordFormatError, match=rf"format_version {FORMAT_VERSION + 1}, written by a newer "
                       rf"provider \(airflow-stateful-provider 9.0\); this one reads up to {FORMAT_VERSION}"):
        RecordedTopology.from_json(json.dumps(document), "the record")


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "the record is not JSON"),
    ("[]", "the record must be a JSON object, got list"),
    ('{"application_id": "a"}', r"the record has no valid format_version \(got None\)"),
    ('{"format_version": 1, "application_id": "a", "stores": []}',
     r"the record \(format_version 1\) is incomplete or malformed: KeyError: 'sources'"),
])
def test_a_malformed_record_is_refused_naming_the_problem(text, message):
    with pytest.raises(TopologyRecordFormatError, match=message):
        RecordedTopology.from_json(text, "the record")
