"""Changelog and repartition topic configuration computed from a topology (docs/semantics.md §7)."""

from __future__ import annotations

from datetime import timedelta

from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed
from airflow_stateful_provider.streams.topics.internal_topics import (
    changelog_topic_configs,
    internal_topics,
    repartition_topic_configs,
)
from airflow_stateful_provider.streams.windows import SessionWindows


def _app_topology():
    builder = StreamsBuilder()
    windows = SessionWindows.of_inactivity_gap_and_grace(timedelta(minutes=5), timedelta(minutes=1))
    builder.stream("clicks").group_by_key().windowed_by(windows).count(Materialized.as_("s"))
    builder.table("rates", Consumed(), Materialized.as_versioned("v", timedelta(hours=1)))
    builder.table("users", Consumed(), Materialized.as_("kv"))
    builder.table("tmp", Consumed(), Materialized.as_("nolog").with_logging_disabled())
    builder.stream("orders").group_by(lambda k, v: v).count(Materialized.as_("per-value"))
    return builder.build()


def test_semantics_7_examples():
    configs = changelog_topic_configs(_app_topology(), "app")
    s = configs["s"]
    assert s.name == "app-s-changelog"
    assert s.config == {
        "message.timestamp.type": "CreateTime",
        "cleanup.policy": "compact,delete",
        "retention.ms": "86760000",
    }
    v = configs["v"]
    assert v.name == "app-v-changelog"
    assert v.config["cleanup.policy"] == "compact"
    assert v.config["min.compaction.lag.ms"] == "90000000"
    assert configs["kv"].config == {"message.timestamp.type": "CreateTime", "cleanup.policy": "compact"}
    assert "nolog" not in configs


def test_partitions_follow_the_subtopology_inputs():
    topology = _app_topology()
    counts = {"clicks": 4, "rates": 2, "users": 3, "tmp": 1, "orders": 5}
    configs = changelog_topic_configs(topology, "app", counts)
    assert configs["s"].partitions == 4
    assert configs["v"].partitions == 2
    # the aggregation after group_by reads the repartition topic, which gets the writer's count
    assert configs["per-value"].partitions == 5
    repartition = repartition_topic_configs(topology, "app", counts)
    (name,) = repartition
    assert name.startswith("app-") and name.endswith("-repartition")
    assert repartition[name].partitions == 5
    assert repartition[name].config["cleanup.policy"] == "delete"
    kinds = [t.kind for t in internal_topics(topology, "app", counts)]
    assert kinds[0] == "repartition" and kinds.count("changelog") == 4


def test_user_log_config_overrides():
    builder = StreamsBuilder()
    builder.table("t", Consumed(), Materialized.as_("kv").with_logging_enabled({"min.insync.replicas": 2}))
    (topic,) = changelog_topic_configs(builder.build(), "app").values()
    assert topic.config["min.insync.replicas"] == "2"
    assert topic.config["cleanup.policy"] == "compact"
