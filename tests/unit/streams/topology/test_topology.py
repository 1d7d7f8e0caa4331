"""Topology building, subtopologies, describe(), TaskId and co-partitioning checks."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.processor import Processor
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topology.store_builders import Stores
from airflow_stateful_provider.streams.topology.topology import Topology


class Noop(Processor):
    def process(self, record):
        self.context.forward(record)


def kv(name):
    return Stores.key_value_store_builder(Stores.in_memory_key_value_store(name))


def test_task_id_string_form_and_parse():
    assert str(TaskId(0, 1)) == "0_1"
    assert TaskId.parse("12_3") == TaskId(12, 3)
    assert sorted([TaskId(1, 0), TaskId(0, 2), TaskId(0, 1)]) == [TaskId(0, 1), TaskId(0, 2), TaskId(1, 0)]
    for bad in ("0-1", "a_1", "1_", "_1", ""):
        with pytest.raises(ValueError, match="task id"):
            TaskId.parse(bad)
    with pytest.raises(ValueError, match="partition"):
        TaskId(0, -1)


def test_unknown_parent_is_named():
    t = Topology().add_source("src", "in")
    with pytest.raises(TopologyError, match="unknown parent 'nope'"):
        t.add_processor("p", Noop, "nope")
    with pytest.raises(TopologyError, match="unknown parent 'ghost'"):
        t.add_sink("s", "out", "ghost")


def test_duplicate_names_topics_and_stores():
    t = Topology().add_source("src", "in").add_processor("p", Noop, "src")
    with pytest.raises(TopologyError, match="'p' is already used by a processor"):
        t.add_processor("p", Noop, "src")
    with pytest.raises(TopologyError, match="'src' is already used by a source"):
        t.add_sink("src", "out", "p")
    with pytest.raises(TopologyError, match="topic 'in' of source 'src2' is already read by source 'src'"):
        t.add_source("src2", "in")
    t.add_state_store(kv("store"), "p")
    with pytest.raises(TopologyError, match="state store 'store' is already added"):
        t.add_state_store(kv("store"), "p")


def test_cycle_self_parent_refused():
    t = Topology().add_source("src", "in")
    with pytest.raises(TopologyError, match="cycle"):
        t.add_processor("p", Noop, "p")


def test_cycle_detected_if_graph_is_edited_behind_the_api():
    t = Topology().add_source("src", "in").add_processor("a", Noop, "src").add_processor("b", Noop, "a")
    t._children["b"].append("a")  # simulate a corrupted graph
    with pytest.raises(TopologyError, match="cycle through node"):
        t.validate()


def test_store_used_by_no_processor():
    t = Topology().add_source("src", "in").add_processor("p", Noop, "src").add_state_store(kv("lonely"))
    with pytest.raises(TopologyError, match="'lonely' is not connected to any processor"):
        t.subtopologies()
    t.connect_processor_and_state_stores("p", "lonely")
    assert t.subtopologies()[0].store_names == ("lonely",)


def test_connect_errors():
    t = Topology().add_source("src", "in").add_processor("p", Noop, "src").add_sink("out", "o", "p")
    with pytest.raises(TopologyError, match="unknown state store 'x'"):
        t.connect_processor_and_state_stores("p", "x")
    t.add_state_store(kv("s"))
    with pytest.raises(TopologyError, match="unknown processor 'zz'"):
        t.connect_processor_and_state_stores("zz", "s")
    with pytest.raises(TopologyError, match="only be connected to processors"):
        t.connect_processor_and_state_stores("out", "s")


def test_bad_supplier_and_bad_names():
    t = Topology().add_source("src", "in")
    with pytest.raises(TopologyError, match="supplier"):
        t.add_processor("p", Noop(), "src")
    with pytest.raises(TopologyError, match="topic name"):
        t.add_source("s2", "bad topic")
    with pytest.raises(TopologyError, match="node name"):
        t.add_processor("has space", Noop, "src")
    with pytest.raises(TopologyError, match="at least one parent"):
        t.add_processor("orphan", Noop)
    t.add_sink("sink", "out", "src")
    with pytest.raises(TopologyError, match="cannot have sink"):
        t.add_processor("after-sink", Noop, "sink")


def test_subtopologies_are_connected_components_and_stores_connect():
    t = (
        Topology()
        .add_source("b-src", "b")
        .add_source("a-src", "a")
        .add_processor("pa", Noop, "a-src")
        .add_processor("pb", Noop, "b-src")
        .add_source("c-src", "c")
        .add_processor("pc", Noop, "c-src")
        .add_sink("sink-c", "out", "pc")
    )
    subs = t.subtopologies()
    # numbered in the order their first node was added, like Kafka Streams
    assert [s.source_topics for s in subs] == [("b",), ("a",), ("c",)]
    assert subs[2].sink_topics == ("out",)
    # a store shared by pa and pb puts a and b into one subtopology
    t.add_state_store(kv("shared"), "pa", "pb")
    subs = t.subtopologies()
    assert len(subs) == 2
    assert set(subs[0].source_topics) == {"a", "b"}  # b-src was added first
    assert subs[0].store_names == ("shared",)
    assert t.subtopology_of_topic("c").id == 1


def test_describe_is_readable():
    t = (
        Topology()
        .add_source("src", "in")
        .add_processor("p", Noop, "src")
        .add_state_store(kv("counts"), "p")
        .add_sink("sink", "out", "p")
        .add_source("src2", "other")
    )
    assert str(t.describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: src (topics: [in])\n"
        "      --> p\n"
        "    Processor: p (stores: [counts])\n"
        "      --> sink\n"
        "      <-- src\n"
        "    Sink: sink (topic: out)\n"
        "      <-- p\n"
        "   Sub-topology: 1\n"
        "    Source: src2 (topics: [other])\n"
        "      --> none\n"
    )


def test_partition_counts_checked_at_start():
    t = (
        Topology()
        .add_source("s1", "x", "y")
        .add_processor("p", Noop, "s1")
        .add_source("s2", "z")
    )
    assert t.validate_partition_counts({"x": 3, "y": 3, "z": 1}, "app") == {0: 3, 1: 1}
    with pytest.raises(TopologyError, match=r"subtopology 0 must be co-partitioned.*'x': 3.*'y': 2"):
        t.validate_partition_counts({"x": 3, "y": 2, "z": 1}, "app")
    with pytest.raises(TopologyError, match="source topic 'z' of subtopology 1 does not exist"):
        t.validate_partition_counts({"x": 3, "y": 3}, "app")
    assert t.task_ids({"x": 2, "y": 2, "z": 1}, "app") == [TaskId(0, 0), TaskId(0, 1), TaskId(1, 0)]


def test_internal_topics_are_decorated_and_derived():
    t = (
        Topology()
        .add_source("src", "in")
        .add_internal_topic("agg-repartition")
        .add_sink("rsink", "agg-repartition", "src")
        .add_source("rsrc", "agg-repartition")
        .add_processor("p", Noop, "rsrc")
    )
    assert t.decorate_topic("agg-repartition", "app") == "app-agg-repartition"
    assert t.decorate_topic("in", "app") == "in"
    assert t.resolve_partition_counts({"in": 6}, "app") == {"in": 6, "app-agg-repartition": 6}
    assert t.validate_partition_counts({"in": 6, "app-agg-repartition": 4}, "app") == {0: 6, 1: 4}
    assert t.subtopologies()[1].repartition_source_topics == ("agg-repartition",)


def test_internal_topic_nobody_reads_is_an_error():
    t = Topology().add_source("src", "in").add_internal_topic("x-repartition").add_sink("k", "x-repartition", "src")
    with pytest.raises(TopologyError, match="read by no source"):
        t.validate()


def test_a_serde_named_by_an_unknown_name_fails_where_it_is_given():
    from airflow_stateful_provider.streams.dsl.materialized import Materialized
    from airflow_stateful_provider.streams.dsl.parameters import Consumed, Grouped, Joined, Produced
    from airflow_stateful_provider.streams.errors import ConfigError

    for build, what in [
        (lambda: Topology().add_source("in", "t", key_serde="avro"), "source 'in' key_serde"),
        (lambda: Topology().add_source("in", "t").add_sink("out", "u", "in", value_serde=object()),
         "sink 'out' value_serde must be a serde"),
        (lambda: Topology().add_source("in", "t").add_processor("p", Processor, "in").add_state_store(
            Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), "string", "avro"), "p"),
         "state store 's' value_serde"),
        (lambda: Consumed.with_("avro"), "Consumed key_serde"),
        (lambda: Produced.with_(None, "protobuf"), "Produced value_serde"),
        (lambda: Grouped.with_("avro"), "Grouped key_serde"),
        (lambda: Joined(other_value_serde="avro"), "Joined other_value_serde"),
        (lambda: Materialized.as_("m").with_value_serde("avro"), "Materialized value_serde"),
    ]:
        with pytest.raises(ConfigError, match=what):
            build()
    # built-in names, serde objects and None (the application's default) are fine
    Topology().add_source("in", "t", key_serde="string", value_serde=None)
    Consumed.with_("int64", "json")
