"""The TopologyTestDriver's public API (it is what users test their topologies with)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.errors import ProcessingError, StreamsError
from airflow_stateful_provider.streams.processor import KeyValue, Processor, Record
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.testing import EmptyTopicError, TestRecord, TopologyTestDriver
from airflow_stateful_provider.streams.topology.topology import Topology
from airflow_stateful_provider.streams.windows import SessionWindows

S = Serdes.string()


def _passthrough():
    builder = StreamsBuilder()
    builder.stream("in", Consumed.with_(S, S)).to("out", Produced.with_(S, S))
    return builder.build()


def test_read_api_and_empty_topic():
    with TopologyTestDriver(_passthrough()) as driver:
        topic = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        assert out.is_empty() and out.get_queue_size() == 0
        with pytest.raises(EmptyTopicError, match="'out' is empty"):
            out.read_record()
        topic.pipe_record_list([TestRecord("a", "1", 5), ("b", "2", 6), ("a", None, 7)])
        assert out.get_queue_size() == 3
        assert out.read_key_value() == KeyValue("a", "1")
        assert out.read_value() == "2"
        assert out.read_record() == TestRecord("a", None, 7)
        topic.pipe_key_value_list([("x", "1"), ("x", "2"), ("y", "3")])
        assert out.read_key_values_to_map() == {"x": "2", "y": "3"}


def test_input_topic_time_auto_advance_and_datetime():
    with TopologyTestDriver(_passthrough()) as driver:
        start = datetime(2024, 1, 1, tzinfo=UTC)
        topic = driver.create_input_topic("in", S, S, start_timestamp=start, auto_advance=timedelta(seconds=1))
        out = driver.create_output_topic("out", S, S)
        topic.pipe_value_list(["a", "b"])
        topic.advance_time(500)
        topic.pipe_input("k", "c")
        base = int(start.timestamp() * 1000)
        assert [r.timestamp for r in out.read_records_to_list()] == [base, base + 1000, base + 2500]
        with pytest.raises(ValueError, match="timezone-aware"):
            topic.pipe_input("k", "v", datetime(2024, 1, 1))


def test_unknown_topics_and_wrong_arguments():
    with TopologyTestDriver(_passthrough()) as driver:
        with pytest.raises(StreamsError, match="unknown input topic 'nope'.*\\['in'\\]"):
            driver.create_input_topic("nope", S, S)
        with pytest.raises(StreamsError, match="no state store named 'x'"):
            driver.get_state_store("x")
    with pytest.raises(TypeError, match="StreamsBuilder.build"):
        TopologyTestDriver(StreamsBuilder())
    with pytest.raises(ValueError, match="store_type"):
        TopologyTestDriver(_passthrough(), store_type="disk")


def test_closed_driver_refuses_use():
    driver = TopologyTestDriver(_passthrough())
    topic = driver.create_input_topic("in", S, S)
    driver.close()
    driver.close()  # idempotent
    with pytest.raises(StreamsError, match="closed"):
        topic.pipe_input("k", "v", 0)


def test_store_getters_check_the_store_type():
    builder = StreamsBuilder()
    builder.table("t", Consumed.with_(S, S), Materialized.as_("kv"))
    builder.table("v", Consumed.with_(S, S), Materialized.as_versioned("ver", 1000))
    builder.stream("s", Consumed.with_(S, S)).group_by_key().windowed_by(
        SessionWindows.of_inactivity_gap_with_no_grace(10)).count(Materialized.as_("sess"))
    with TopologyTestDriver(builder.build()) as driver:
        assert driver.get_key_value_store("kv").get("x") is None
        assert driver.get_versioned_key_value_store("ver").get("x") is None
        assert driver.get_session_store("sess").fetch("x") == []
        with pytest.raises(StreamsError, match="'kv' is a key_value store, not a session store"):
            driver.get_session_store("kv")
        with pytest.raises(StreamsError, match="'sess' is a session store, not a versioned store"):
            driver.get_versioned_key_value_store("sess")
        assert set(driver.get_all_state_stores()) == {"kv", "ver", "sess"}


def test_rocksdb_stores_live_in_a_temp_dir_removed_on_close():
    builder = StreamsBuilder()
    builder.table("t", Consumed.with_(S, S), Materialized.as_("kv"))
    driver = TopologyTestDriver(builder.build(), store_type="rocksdb")
    state_dir = driver.config.state_dir
    driver.create_input_topic("t", S, S).pipe_input("k", "v", 1)
    assert driver.get_key_value_store("kv").get("k") == "v"
    assert os.path.isdir(os.path.join(state_dir, "topology-test-driver", "0_0", "kv"))
    driver.close()
    assert not os.path.exists(state_dir)


def test_config_mapping_and_object():
    with TopologyTestDriver(_passthrough(), {"application_id": "my-app"}) as driver:
        assert driver.config.application_id == "my-app"
    config = StreamsConfig("other", "broker:9092", state_dir="/should/not/be/used")
    with TopologyTestDriver(_passthrough(), config) as driver:
        assert driver.config.application_id == "other"
        assert driver.config.state_dir != "/should/not/be/used"


def test_processor_errors_surface_wrapped():
    class Boom(Processor):
        def process(self, record):
            raise KeyError("missing")

    topology = Topology().add_source("src", "in").add_processor("boom", Boom, "src")
    with TopologyTestDriver(topology) as driver:
        with pytest.raises(ProcessingError, match="processor 'boom'") as info:
            driver.create_input_topic("in", S, S).pipe_input("k", "v", 0)
        assert isinstance(info.value.__cause__, KeyError)


def test_context_metadata_seen_by_a_processor():
    seen = []

    class Inspect(Processor):
        def process(self, record):
            ctx = self.context
            seen.append((ctx.application_id, str(ctx.task_id), ctx.record_metadata.topic,
                         ctx.record_metadata.partition, ctx.record_metadata.offset,
                         ctx.current_stream_time_ms, ctx.current_system_time_ms, ctx.app_configs))

    topology = Topology().add_source("src", "in").add_processor("i", Inspect, "src")
    config = {"application_id": "meta", "app_configs": {"x": 1}}
    with TopologyTestDriver(topology, config, initial_wall_clock_time=timedelta(seconds=3)) as driver:
        topic = driver.create_input_topic("in", S, S)
        topic.pipe_input("k", "v", 10)
        driver.advance_wall_clock_time(5)
        topic.pipe_input("k", "v", 4)
    assert seen == [("meta", "0_0", "in", 0, 0, 10, 3000, {"x": 1}), ("meta", "0_0", "in", 0, 1, 10, 3005, {"x": 1})]


def test_forward_to_named_child_and_store_access_checks():
    class Router(Processor):
        def process(self, record):
            self.context.forward(record, "odd" if int(record.value) % 2 else "even")

    class Sneaky(Processor):
        def process(self, record):
            self.context.get_state_store("private")

    class Bad(Processor):
        def process(self, record):
            self.context.forward(record, "nobody")

    from airflow_stateful_provider.streams.topology.store_builders import Stores

    topology = (
        Topology()
        .add_source("src", "in", key_serde=S, value_serde=S)
        .add_processor("router", Router, "src")
        .add_sink("odd", "odd-out", "router", key_serde=S, value_serde=S)
        .add_sink("even", "even-out", "router", key_serde=S, value_serde=S)
        .add_source("src2", "in2", key_serde=S, value_serde=S)
        .add_processor("sneaky", Sneaky, "src2")
        .add_processor("owner", Router, "src2")
        .add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("private")), "owner")
        .add_source("src3", "in3", key_serde=S, value_serde=S)
        .add_processor("bad", Bad, "src3")
    )
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("a", "1"), ("b", "2")])
        assert driver.create_output_topic("odd-out", S, S).read_key_values_to_list() == [("a", "1")]
        assert driver.create_output_topic("even-out", S, S).read_key_values_to_list() == [("b", "2")]
        with pytest.raises(ProcessingError, match="no access to state store 'private'"):
            driver.create_input_topic("in2", S, S).pipe_input("k", "1", 0)
        with pytest.raises(ProcessingError, match="no child named 'nobody'"):
            driver.create_input_topic("in3", S, S).pipe_input("k", "1", 0)


def test_processor_close_called_on_driver_close():
    closed = []

    class Closing(Processor):
        def process(self, record):
            pass

        def close(self):
            closed.append(True)

    topology = Topology().add_source("src", "in").add_processor("c", Closing, "src")
    TopologyTestDriver(topology).close()
    assert closed == [True]


def test_record_forwarded_with_new_timestamp_reaches_sink():
    class Shift(Processor):
        def process(self, record):
            self.context.forward(Record(record.key, record.value, record.timestamp + 100))

    topology = (Topology().add_source("src", "in", key_serde=S, value_serde=S).add_processor("shift", Shift, "src")
                .add_sink("sink", "out", "shift", key_serde=S, value_serde=S))
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v", 1)
        assert driver.create_output_topic("out", S, S).read_record().timestamp == 101
