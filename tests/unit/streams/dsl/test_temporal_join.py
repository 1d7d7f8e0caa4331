"""The temporal join of the original design (docs/semantics.md §5) through the TopologyTestDriver."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.testing import TopologyTestDriver

S = Serdes.string()


def _topology(materialized: Materialized, left: bool = False):
    builder = StreamsBuilder()
    table = builder.table("B", Consumed.with_(S, S), materialized)
    stream = builder.stream("A", Consumed.with_(S, S))
    joined = (stream.left_join if left else stream.join)(table, lambda a, b: f"({a}, {b})")
    joined.to("joined", Produced.with_(S, S))
    return builder.build()


@pytest.fixture(params=["in_memory", "rocksdb"])
def store_type(request):
    return request.param


def _run(topology, store_type, steps):
    with TopologyTestDriver(topology, store_type=store_type) as driver:
        a = driver.create_input_topic("A", S, S)
        b = driver.create_input_topic("B", S, S)
        out = driver.create_output_topic("joined", S, S)
        results = []
        for topic, value, ts in steps:
            (a if topic == "A" else b).pipe_input("k", value, ts)
            results.append([(r.value, r.timestamp) for r in out.read_records_to_list()])
        return results


STEPS = [("B", "b0", 0), ("A", "a1", 1), ("B", "b3", 3), ("A", "a4", 4), ("A", "a2", 2)]


def test_versioned_table_joins_as_of_the_stream_record_time(store_type):
    topology = _topology(Materialized.as_versioned("rates", history_retention=60_000))
    assert _run(topology, store_type, STEPS) == [
        [],
        [("(a1, b0)", 1)],
        [],
        [("(a4, b3)", 4)],
        [("(a2, b0)", 2)],
    ]


def test_plain_table_joins_with_the_latest_value(store_type):
    topology = _topology(Materialized.as_("rates"))
    assert _run(topology, store_type, STEPS)[-1] == [("(a2, b3)", 2)]


def test_inner_join_emits_nothing_before_the_first_version(store_type):
    topology = _topology(Materialized.as_versioned("rates", history_retention=60_000))
    steps = [("B", "b5", 5), ("A", "a3", 3), ("A", "a5", 5)]
    assert _run(topology, store_type, steps) == [[], [], [("(a5, b5)", 5)]]


def test_left_join_emits_with_none_when_absent(store_type):
    topology = _topology(Materialized.as_versioned("rates", history_retention=60_000), left=True)
    steps = [("B", "b5", 5), ("A", "a3", 3), ("A", "a5", 5)]
    assert _run(topology, store_type, steps) == [[], [("(a3, None)", 3)], [("(a5, b5)", 5)]]


def test_tombstone_in_versioned_table_ends_the_join_window(store_type):
    topology = _topology(Materialized.as_versioned("rates", history_retention=60_000))
    with TopologyTestDriver(topology, store_type=store_type) as driver:
        a = driver.create_input_topic("A", S, S)
        b = driver.create_input_topic("B", S, S)
        out = driver.create_output_topic("joined", S, S)
        b.pipe_input("k", "b0", 0)
        b.pipe_input("k", None, 10)  # deleted from 10 on
        a.pipe_input("k", "a5", 5)
        a.pipe_input("k", "a12", 12)
        assert out.read_values_to_list() == ["(a5, b0)"]


def test_versioned_table_source_drops_put_older_than_history_retention(store_type):
    """A put older than observed - HR is NOT_PUT: the table forwards nothing for it."""
    builder = StreamsBuilder()
    table = builder.table("B", Consumed.with_(S, S), Materialized.as_versioned("rates", history_retention=100))
    table.to_stream().to("table-updates", Produced.with_(S, S))
    with TopologyTestDriver(builder.build(), store_type=store_type) as driver:
        b = driver.create_input_topic("B", S, S)
        out = driver.create_output_topic("table-updates", S, S)
        b.pipe_input("k", "new", 1000)
        b.pipe_input("k", "older-but-kept", 950)   # within HR: accepted (not the newest)
        b.pipe_input("k", "too-old", 800)          # 800 < 1000 - 100: NOT_PUT
        assert [(r.value, r.timestamp) for r in out.read_records_to_list()] == [
            ("new", 1000), ("older-but-kept", 950)
        ]
        store = driver.get_versioned_key_value_store("rates")
        assert store.get("k").value == "new"
        assert store.get("k", 960).value == "older-but-kept"
        # the changelog still receives the NOT_PUT record (docs/semantics.md §5)
        changelog = driver.create_output_topic("topology-test-driver-rates-changelog", S, S)
        assert [r.value for r in changelog.read_records_to_list()] == ["new", "older-but-kept", "too-old"]


def test_join_is_in_one_subtopology_with_copartitioned_sources():
    topology = _topology(Materialized.as_versioned("rates", history_retention=60_000))
    (sub,) = topology.subtopologies()
    assert set(sub.source_topics) == {"A", "B"}
    assert sub.store_names == ("rates",)
    from airflow_stateful_provider.streams.errors import TopologyError

    with pytest.raises(TopologyError, match="co-partitioned"):
        topology.validate_partition_counts({"A": 4, "B": 2}, "app")
    assert topology.validate_partition_counts({"A": 4, "B": 4}, "app") == {0: 4}


def test_join_after_key_change_repartitions_the_stream(store_type):
    builder = StreamsBuilder()
    table = builder.table("B", Consumed.with_(S, S), Materialized.as_("t"))
    stream = builder.stream("A", Consumed.with_(S, S)).select_key(lambda k, v: v.split(":")[0])
    stream.join(table, lambda a, b: f"{a}+{b}", ).to("joined", Produced.with_(S, S))
    topology = builder.build()
    assert len(topology.subtopologies()) == 2
    assert any(t.endswith("-left-repartition") for t in topology.internal_topics)
    with TopologyTestDriver(topology, {"default_key_serde": "string", "default_value_serde": "string"},
                            store_type=store_type) as driver:
        driver.create_input_topic("B", S, S).pipe_input("x", "bx", 0)
        driver.create_input_topic("A", S, S).pipe_input("ignored", "x:1", 5)
        assert driver.create_output_topic("joined", S, S).read_key_value() == ("x", "x:1+bx")
