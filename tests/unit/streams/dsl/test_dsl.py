"""DSL operations through the TopologyTestDriver: stateless ops, grouping, repartitioning."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Grouped, Produced
from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.processor import Processor
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.testing import TopologyTestDriver
from airflow_stateful_provider.streams.topology.store_builders import Stores

S = Serdes.string()
L = Serdes.int64()
STRINGS = {"default_key_serde": "string", "default_value_serde": "string"}


def test_stateless_operations_chain():
    seen, each = [], []
    builder = StreamsBuilder()
    (
        builder.stream("in", Consumed.with_(S, S))
        .filter(lambda k, v: v != "drop")
        .filter_not(lambda k, v: v == "skip")
        .map_values(str.upper)
        .peek(lambda k, v: seen.append((k, v)))
        .map(lambda k, v: (v, k))
        .select_key(lambda k, v: k + "!")
        .to("out", Produced.with_(S, S))
    )
    builder.stream("in2", Consumed.with_(S, S)).foreach(lambda k, v: each.append(v))
    with TopologyTestDriver(builder.build()) as driver:
        topic = driver.create_input_topic("in", S, S)
        topic.pipe_key_value_list([("a", "x"), ("b", "drop"), ("c", "skip"), ("d", "y")])
        driver.create_input_topic("in2", S, S).pipe_value_list(["v1", "v2"])
        out = driver.create_output_topic("out", S, S)
        assert out.read_key_values_to_list() == [("X!", "a"), ("Y!", "d")]
        assert seen == [("a", "X"), ("d", "Y")]
        assert each == ["v1", "v2"]


def test_record_timestamp_and_headers_flow_through():
    builder = StreamsBuilder()
    builder.stream("in", Consumed.with_(S, S)).map_values(lambda v: v * 2).to("out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "ab", 42, headers=[("h", b"1")])
        record = driver.create_output_topic("out", S, S).read_record()
        assert (record.key, record.value, record.timestamp, record.headers) == ("k", "abab", 42, (("h", b"1"),))


def test_topic_name_extractor_and_partitioner():
    builder = StreamsBuilder()
    builder.stream("in", Consumed.with_(S, S)).to(
        lambda k, v, ctx: f"out-{v}", Produced(S, S, partitioner=lambda topic, k, v, n: 0)
    )
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("a", "x"), ("b", "y")])
        assert driver.create_output_topic("out-x", S, S).read_key_value() == ("a", "x")
        assert driver.create_output_topic("out-y", S, S).read_key_value() == ("b", "y")


def test_group_by_key_count_without_key_change_stays_in_one_subtopology():
    builder = StreamsBuilder()
    (builder.stream("in", Consumed.with_(S, S)).group_by_key().count(Materialized.as_("counts"))
     .to_stream().to("out", Produced.with_(S, L)))
    topology = builder.build()
    assert len(topology.subtopologies()) == 1
    assert topology.internal_topics == {}
    with TopologyTestDriver(topology) as driver:
        topic = driver.create_input_topic("in", S, S)
        topic.pipe_key_value_list([("a", "1"), ("b", "1"), ("a", "1")])
        topic.pipe_input(None, "1", 0)
        assert driver.create_output_topic("out", S, L).read_key_values_to_list() == [("a", 1), ("b", 1), ("a", 2)]
        assert driver.get_key_value_store("counts").get("a") == 2
        assert driver.metrics()["dropped-records-total:null-key-or-value"] == 1


def test_group_by_repartitions_through_an_internal_topic():
    builder = StreamsBuilder()
    (builder.stream("words", Consumed.with_(S, S))
     .group_by(lambda k, v: v, Grouped(S, S, "by-word"))
     .count(Materialized.as_("word-counts"))
     .to_stream().to("out", Produced.with_(S, L)))
    topology = builder.build()
    assert topology.internal_topics == {"by-word-repartition": "repartition"}
    subs = topology.subtopologies()
    assert len(subs) == 2
    assert subs[1].source_topics == ("by-word-repartition",)
    assert "by-word-repartition" in subs[0].sink_topics
    text = str(topology.describe())
    assert "Sink: by-word-repartition-sink (topic: by-word-repartition)" in text
    assert "Source: by-word-repartition-source (topics: [by-word-repartition])" in text
    with TopologyTestDriver(topology, {"application_id": "wc"}) as driver:
        driver.create_input_topic("words", S, S).pipe_key_value_list([("1", "a"), ("2", "b"), ("3", "a")])
        assert driver.create_output_topic("out", S, L).read_key_values_to_map() == {"a": 2, "b": 1}
        # the repartition topic really carries the re-keyed records, prefixed with the app id
        repartition = driver.create_output_topic("wc-by-word-repartition", S, S)
        assert repartition.read_key_values_to_list() == [("a", "a"), ("b", "b"), ("a", "a")]
        assert [t.id for t in driver.tasks] == [driver.tasks[0].id, driver.tasks[1].id]
        assert str(driver.tasks[1].id) == "1_0"


def test_repartition_default_name_comes_from_the_store_and_filters_null_keys():
    builder = StreamsBuilder()
    (builder.stream("in", Consumed.with_(S, S)).select_key(lambda k, v: None if v == "none" else v)
     .group_by_key().count().to_stream().to("out", Produced.with_(S, L)))
    topology = builder.build()
    (name,) = topology.internal_topics
    assert name.startswith("KSTREAM-AGGREGATE-STATE-STORE-") and name.endswith("-repartition")
    with TopologyTestDriver(topology, STRINGS) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("k", "x"), ("k", "none"), ("k", "x")])
        assert driver.create_output_topic("out", S, L).read_key_values_to_list() == [("x", 1), ("x", 2)]


def test_reduce_and_aggregate():
    builder = StreamsBuilder()
    grouped = builder.stream("in", Consumed.with_(S, S)).group_by_key()
    grouped.reduce(lambda a, b: a + b, Materialized.as_("r")).to_stream().to("r-out", Produced.with_(S, S))
    grouped.aggregate(lambda: 0, lambda k, v, agg: agg + len(v), Materialized.as_("len").with_value_serde(L)) \
        .to_stream().to("a-out", Produced.with_(S, L))
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("k", "ab"), ("k", "c")])
        assert driver.create_output_topic("r-out", S, S).read_values_to_list() == ["ab", "abc"]
        assert driver.create_output_topic("a-out", S, L).read_values_to_list() == [2, 3]


def test_plain_table_to_stream_and_tombstones():
    builder = StreamsBuilder()
    builder.table("t", Consumed.with_(S, S), Materialized.as_("tbl")).to_stream().to("out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build()) as driver:
        topic = driver.create_input_topic("t", S, S)
        topic.pipe_input("k", "v1", 1)
        topic.pipe_input("k", None, 2)
        topic.pipe_input(None, "x", 3)  # null key: dropped, counted
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("k", "v1"), ("k", None)]
        assert driver.get_key_value_store("tbl").get("k") is None
        assert driver.metrics()["dropped-records-total:null-key"] == 1


def test_process_with_a_builder_store():
    class Dedup(Processor):
        def init(self, context):
            super().init(context)
            self.seen = context.get_state_store("seen")

        def process(self, record):
            if self.seen.get(record.key) is None:
                self.seen.put(record.key, record.value)
                self.context.forward(record)

    builder = StreamsBuilder()
    builder.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("seen"), S, S))
    builder.stream("in", Consumed.with_(S, S)).process(Dedup, "seen").to("out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("a", "1"), ("a", "2"), ("b", "3")])
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("a", "1"), ("b", "3")]


def test_builder_errors():
    builder = StreamsBuilder()
    builder.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("unused")))
    builder.stream("in")
    with pytest.raises(TopologyError, match="'unused' was added to the builder but no processor uses it"):
        builder.build()
    builder = StreamsBuilder()
    builder.stream("in")
    builder.build()
    with pytest.raises(TopologyError, match="already built"):
        builder.stream("in2")
    with pytest.raises(TopologyError, match="versioned"):
        StreamsBuilder().stream("x").group_by_key().count(Materialized.as_versioned("v", 10))
    with pytest.raises(TopologyError, match="store_type"):
        Materialized(store_type="disk")


def test_generated_names_follow_kafka_streams():
    builder = StreamsBuilder()
    builder.stream("in").filter(lambda k, v: True).to("out")
    text = str(builder.build().describe())
    assert "Source: KSTREAM-SOURCE-0000000000 (topics: [in])" in text
    assert "Processor: KSTREAM-FILTER-0000000001 (stores: [])" in text
    assert "Sink: KSTREAM-SINK-0000000002 (topic: out)" in text
