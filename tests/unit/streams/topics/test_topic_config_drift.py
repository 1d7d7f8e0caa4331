"""Drift between expected (docs/semantics.md §7) and actual internal topic configs: pure."""

from __future__ import annotations

from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed
from airflow_stateful_provider.streams.topics.config_drift import (
    Drift,
    application_internal_topic_names,
    config_drift,
    drift_table,
    infer_internal_topics,
    repair_plan,
)
from airflow_stateful_provider.streams.topics.internal_topics import (
    REPARTITION_TOPIC_CONFIG,
    InternalTopic,
    internal_topics,
)
from airflow_stateful_provider.streams.windows import SessionWindows

SESSION = {"cleanup.policy": "compact,delete", "retention.ms": "86760000", "message.timestamp.type": "CreateTime"}


def session_topic(partitions: int | None = 2) -> InternalTopic:
    return InternalTopic("app-s-changelog", partitions, dict(SESSION), "changelog", 0, "s")


def test_no_drift_when_equal_and_policy_lists_compare_as_sets():
    actual = {"app-s-changelog": {**SESSION, "cleanup.policy": "delete, compact", "segment.bytes": "1"}}
    assert config_drift([session_topic()], actual, {"app-s-changelog": 2}) == []


def test_changed_retention_is_one_repairable_drift():
    actual = {"app-s-changelog": {**SESSION, "retention.ms": "1000"}}
    assert config_drift([session_topic()], actual, {"app-s-changelog": 2}) == [
        Drift("app-s-changelog", "retention.ms", "86760000", "1000", True,
              "Kafka Streams' changelog config of store 's'")]


def test_missing_key_counts_as_drift_with_actual_none():
    actual = {"app-s-changelog": {"cleanup.policy": "compact,delete", "retention.ms": "86760000"}}
    (drift,) = config_drift([session_topic()], actual, {"app-s-changelog": 2})
    assert (drift.key, drift.expected, drift.actual, drift.repairable) == (
        "message.timestamp.type", "CreateTime", None, True)


def test_partition_mismatch_and_missing_topic_are_manual():
    other = InternalTopic("app-r-repartition", 4, dict(REPARTITION_TOPIC_CONFIG), "repartition", 0)
    drifts = config_drift([session_topic(partitions=2), other], {"app-s-changelog": dict(SESSION)},
                          {"app-s-changelog": 3})
    assert [(d.topic, d.key, d.expected, d.actual, d.repairable) for d in drifts] == [
        ("app-r-repartition", "topic", "exists", None, False),
        ("app-s-changelog", "partitions", "2", "3", False)]
    assert repair_plan(drifts) == {}
    assert "partition counts are not repaired" in drifts[1].reason


def test_unknown_partitions_are_not_checked():
    assert config_drift([session_topic(partitions=None)], {"app-s-changelog": dict(SESSION)},
                        {"app-s-changelog": 7}) == []


def test_repair_plan_groups_repairable_values_by_topic():
    drifts = [Drift("t1", "a", "1", "2", True), Drift("t1", "b", "x", None, True),
              Drift("t2", "partitions", "2", "3", False)]
    assert repair_plan(drifts) == {"t1": {"a": "1", "b": "x"}}


def test_expected_configs_from_a_topology_match_semantics_example():
    builder = StreamsBuilder()
    (builder.stream("in", Consumed.with_("string", "string")).group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5 * 60_000, 60_000)).count(Materialized.as_("s")))
    (topic,) = internal_topics(builder.build(), "app", {"in": 2})
    assert (topic.name, topic.partitions) == ("app-s-changelog", 2)
    assert config_drift([topic], {"app-s-changelog": dict(SESSION)}, {"app-s-changelog": 2}) == []


def test_own_topics_exclude_an_application_whose_id_extends_ours():
    names = ["app-s-changelog", "app-x-repartition", "app-status", "app-in", "app-v2-status", "app-v2-s-changelog",
             "other-s-changelog"]
    assert application_internal_topic_names("app", names) == ["app-s-changelog", "app-x-repartition"]


def test_inference_without_topology():
    actual = {
        "app-ok-changelog": dict(SESSION),
        "app-short-changelog": {**SESSION, "retention.ms": "1000"},
        "app-kv-changelog": {"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime",
                             "min.compaction.lag.ms": "0"},
        "app-v-changelog": {"cleanup.policy": "compact", "min.compaction.lag.ms": "90000000",
                            "message.timestamp.type": "CreateTime"},
        "app-odd-changelog": {"cleanup.policy": "compact", "min.compaction.lag.ms": "5",
                              "message.timestamp.type": "CreateTime"},
        "app-del-changelog": {"cleanup.policy": "delete", "message.timestamp.type": "CreateTime"},
        "app-r-repartition": {**REPARTITION_TOPIC_CONFIG, "retention.ms": "604800000"},
    }
    inferred = infer_internal_topics("app", actual)
    drifts = config_drift(inferred.topics, actual, {})
    assert [(d.topic, d.key, d.expected, d.actual) for d in drifts] == [
        ("app-kv-changelog", "message.timestamp.type", "CreateTime", "LogAppendTime"),
        ("app-r-repartition", "retention.ms", "-1", "604800000")]
    assert [(f.topic, f.key, f.repairable) for f in inferred.findings] == [
        ("app-del-changelog", "cleanup.policy", False),
        ("app-odd-changelog", "min.compaction.lag.ms", False),
        ("app-short-changelog", "retention.ms", False)]
    notes = "\n".join(inferred.unchecked)
    assert "app-ok-changelog: session changelog, retention.ms 86760000 (store retention 360000 ms)" in notes
    assert "app-v-changelog: versioned changelog" in notes and "history retention 3600000 ms" in notes
    assert "app-kv-changelog: taken for a key-value changelog" in notes
    assert "partition counts" in notes


def test_drift_table_lists_rows_and_manual_reasons():
    table = drift_table([Drift("app-s-changelog", "retention.ms", "86760000", "1000", True),
                         Drift("app-s-changelog", "partitions", "2", "3", False, "needs a person")])
    lines = table.splitlines()
    assert lines[0].split() == ["TOPIC", "KEY", "EXPECTED", "ACTUAL", "ACTION"]
    assert lines[1].split() == ["app-s-changelog", "retention.ms", "86760000", "1000", "repair"]
    assert lines[2].split() == ["app-s-changelog", "partitions", "2", "3", "manual"]
    assert lines[3] == "- app-s-changelog partitions: needs a person"
    assert drift_table([]) == "no drift"
