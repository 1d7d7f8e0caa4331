"""StreamsConfig validation and defaults."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from airflow_stateful_provider.streams.config import MAX_COMMIT_INTERVAL_MS, ProcessingGuarantee, StreamsConfig
from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import ConfigError


def test_defaults():
    c = StreamsConfig("app", "localhost:9092")
    assert c.bootstrap_servers == ("localhost:9092",)
    assert c.num_stream_threads == 1
    assert c.commit_interval_ms == 30_000
    assert c.processing_guarantee is ProcessingGuarantee.AT_LEAST_ONCE
    assert c.deserialization_exception_handler == "log_and_fail"
    assert c.state_dir.endswith("kafka-streams")
    assert c.task_state_dir("0_1").endswith("kafka-streams/app/0_1")
    eos = StreamsConfig("app", "h:1", processing_guarantee="exactly_once_v2")
    assert eos.commit_interval_ms == 100 and eos.exactly_once


def test_durations_accept_timedelta():
    c = StreamsConfig("app", ["a:1", "b:2"], commit_interval_ms=timedelta(seconds=5), max_task_idle_ms=timedelta(0))
    assert c.commit_interval_ms == 5000
    assert StreamsConfig("app", "a:1", commit_interval_ms=MAX_COMMIT_INTERVAL_MS).commit_interval_ms == 86_400_000
    assert c.bootstrap_servers == ("a:1", "b:2")
    assert duration_ms(timedelta(milliseconds=7), "x") == 7
    with pytest.raises(ConfigError, match="whole number of milliseconds"):
        duration_ms(timedelta(microseconds=1500), "x")
    with pytest.raises(ConfigError, match="x must be int milliseconds"):
        duration_ms(1.5, "x")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"application_id": "has space"}, "application_id"),
        ({"application_id": ""}, "application_id"),
        ({"bootstrap_servers": "nohostport"}, "not of the form host:port"),
        ({"bootstrap_servers": ""}, "empty"),
        ({"num_stream_threads": 0}, "num_stream_threads must be >= 1, got 0"),
        ({"num_stream_threads": "2"}, "num_stream_threads must be an int"),
        ({"commit_interval_ms": -1}, "commit_interval_ms must be >= 0"),
        ({"commit_interval_ms": 10**30}, f"commit_interval_ms must be at most 86400000 ms \\(24 h\\), got {10**30} ms: "
                                         "an instance would practically never commit"),
        ({"commit_interval_ms": timedelta(days=2)}, "commit_interval_ms must be at most 86400000 ms \\(24 h\\), got "
                                                    "172800000 ms \\(datetime.timedelta\\(days=2\\)\\)"),
        ({"bootstrap_servers": "http://host:9092"}, "bootstrap_servers entry 'http://host:9092' has a URL scheme "
                                                    "\\('http://'\\).* \\(give 'host:9092'"),
        ({"bootstrap_servers": ["a:1", "SASL_SSL://b:9093"]}, "bootstrap_servers entry 'SASL_SSL://b:9093' has a URL "
                                                              "scheme \\('SASL_SSL://'\\)"),
        ({"bootstrap_servers": "host:9092/kafka"}, "bootstrap_servers entry 'host:9092/kafka' is not of the form "
                                                   "host:port \\(a host has no '/'\\)"),
        ({"processing_guarantee": "exactly_once"}, "processing_guarantee must be one of"),
        ({"default_key_serde": "utf8"}, "default_key_serde"),
        ({"default_value_serde": object()}, "default_value_serde"),
        ({"deserialization_exception_handler": "ignore"}, "deserialization_exception_handler"),
        ({"deserialization_exception_handler": "dead_letter:"}, "deserialization_exception_handler"),
        ({"default_dsl_store": "lmdb"}, "default_dsl_store"),
        ({"replication_factor": 0}, "replication_factor"),
        ({"max_task_idle_ms": -2}, "max_task_idle_ms"),
        ({"application_id": "."}, "application_id"),
        ({"application_id": ".."}, "application_id"),
        ({"application_id": "a" * 242}, "application_id is 242 characters long; at most 235 fit"),
        ({"bootstrap_servers": "h:0"}, "bootstrap_servers entry 'h:0'"),
        ({"bootstrap_servers": "h:65536"}, "bootstrap_servers entry 'h:65536'"),
        ({"bootstrap_servers": ["ok:1", "my host:1"]}, "bootstrap_servers entry 'my host:1'"),
        ({"rack_aware_assignment_tags": "zone"}, "rack_aware_assignment_tags must be a sequence of tag keys, got "
                                                 "the string 'zone'"),
        ({"snapshot_url": "foo://bucket"}, "snapshot_url 'foo://bucket': fsspec knows no scheme 'foo'"),
        ({"group_instance_id": "a b"}, "group_instance_id 'a b'"),
        ({"group_instance_id": "a" * 248}, "group_instance_id"),  # its threads' ids get "-1": 250 characters
        ({"deserialization_exception_handler": "dead_letter:a b"}, "the dead-letter topic name 'a b' contains"),
        ({"client_configs": {"sesion_timeout_ms": 1}}, "did you mean 'session_timeout_ms'"),
        ({"consumer_configs": {"session_timeout_ms": "abc"}}, "consumer_configs: session_timeout_ms must be an int"),
        ({"admin_configs": {"linger_ms": 1}}, "admin_configs: 'linger_ms' is a producer setting"),
        ({"producer_configs": {"client_id": "mine"}}, "producer_configs: 'client_id' cannot be set"),
        ({"default_key_serde": "avro"}, "default_key_serde: unknown serde name 'avro'"),
        ({"metrics_port": 70000}, "metrics_port must be a TCP port 0..65535"),
        ({"metrics_port": "9464"}, "metrics_port must be an int"),
        ({"host_application": {"kind": "spark"}}, r"host_application\['application_id'\] must be a non-empty string"),
        ({"host_application": {"kind": "spark", "application_id": "a", "url": "x"}}, "unknown keys \\['url'\\]"),
        ({"host_application": {"kind": "spark", "application_id": "a", "ui_url": "driver:4040"}},
         "must be an http\\(s\\) URL or None, got 'driver:4040'"),
    ],
)
def test_bad_values_are_named(changes, message):
    values = {"application_id": "app", "bootstrap_servers": "h:1", **changes}
    with pytest.raises(ConfigError, match=message):
        StreamsConfig.from_mapping(values)


def test_keyword_arguments_are_checked_like_a_mapping():
    with pytest.raises(ConfigError, match="unknown streams config key 'comit_interval_ms'.*commit_interval_ms"):
        StreamsConfig("a", "h:1", comit_interval_ms=5)
    with pytest.raises(ConfigError, match="missing the required key 'application_id'"):
        StreamsConfig(bootstrap_servers="h:1")
    fields = len(dataclasses.fields(StreamsConfig))
    with pytest.raises(ConfigError, match=f"at most {fields} positional values, got {fields + 1}"):
        StreamsConfig(*["x"] * (fields + 1))
    assert StreamsConfig("a", "h:1", "/tmp/s").state_dir == "/tmp/s"


def test_tags_and_client_settings_are_kept_as_given():
    c = StreamsConfig("a", "h:1", rack_aware_assignment_tags=["zone", "rack"],
                      client_configs={"session_timeout_ms": 10_000, "linger_ms": 5})
    assert c.rack_aware_assignment_tags == ("zone", "rack")
    assert c.client_configs == {"session_timeout_ms": 10_000, "linger_ms": 5}


def test_from_mapping_unknown_and_missing_keys():
    with pytest.raises(ConfigError, match="unknown streams config key 'comit_interval_ms'.*commit_interval_ms"):
        StreamsConfig.from_mapping({"application_id": "a", "bootstrap_servers": "h:1", "comit_interval_ms": 5})
    with pytest.raises(ConfigError, match="missing the required key 'bootstrap_servers'"):
        StreamsConfig.from_mapping({"application_id": "a"})


def test_round_trip_and_overrides():
    c = StreamsConfig("app", "h:1", deserialization_exception_handler="dead_letter:dlq")
    again = StreamsConfig.from_mapping(c.to_dict())
    assert again == c
    assert c.with_overrides(num_stream_threads=4).num_stream_threads == 4
