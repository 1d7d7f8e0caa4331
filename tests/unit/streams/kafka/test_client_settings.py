"""kafka-python settings: known names per client, value types, the engine's own settings, and
which client gets which ``client_configs`` setting."""

from __future__ import annotations

import socket

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError

from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.kafka.client_settings import (
    ADMIN,
    CONSUMER,
    PRODUCER,
    check_client_settings,
    check_consumer_timeouts,
    check_engine_settings,
    settings_for,
)
from airflow_stateful_provider.streams.kafka.clients import construct_client


def test_a_typo_is_refused_with_the_closest_setting():
    with pytest.raises(ConfigError, match=r"^x: 'sesion_timeout_ms' is not a kafka-python client setting "
                                          r"\(did you mean 'session_timeout_ms'\?\)$"):
        check_client_settings({"sesion_timeout_ms": 1}, "x")


def test_a_setting_of_another_client_says_where_it_belongs():
    with pytest.raises(ConfigError, match="'linger_ms' is a producer setting, not a consumer one; put it in "
                                          "producer_configs"):
        check_client_settings({"linger_ms": 5}, "consumer_configs", (CONSUMER,))
    check_client_settings({"linger_ms": 5, "session_timeout_ms": 10_000, "retry_backoff_ms": 10}, "client_configs")


@pytest.mark.parametrize(("key", "value", "message"), [
    ("session_timeout_ms", "abc", "session_timeout_ms must be an int >= 0, got str 'abc'"),
    ("session_timeout_ms", True, "session_timeout_ms must be an int >= 0, got bool True"),
    ("session_timeout_ms", -1, "session_timeout_ms must be an int >= 0, got int -1"),
    ("check_crcs", "yes", "check_crcs must be true or false"),
    ("retries", "many", "retries must be a number >= 0"),
    ("acks", "one", "acks must be one of [0, 1, -1, 'all']"),
    ("acks", True, "acks must be one of"),
    ("security_protocol", "SASL", "security_protocol must be one of ['PLAINTEXT', 'SSL', 'SASL_PLAINTEXT'"),
    ("compression_type", "brotli", "compression_type must be one of [None, 'gzip'"),
    ("sasl_mechanism", "PLAN", "sasl_mechanism must be one of"),
    ("ssl_cafile", 42, "ssl_cafile must be a string, got int 42"),
    ("send_buffer_bytes", "big", "send_buffer_bytes must be an int >= 0"),
])
def test_a_value_of_the_wrong_type_names_the_setting(key, value, message):
    with pytest.raises(ConfigError, match=f"^client_configs: {message}".replace("[", r"\[").replace("(", r"\(")):
        check_client_settings({key: value}, "client_configs")


def test_good_values_pass_and_none_where_kafka_python_defaults_to_none():
    check_client_settings({"acks": "all", "retries": 5, "consumer_timeout_ms": 1.5, "compression_type": None,
                           "ssl_cafile": None, "sasl_mechanism": "PLAIN", "receive_buffer_bytes": None,
                           "isolation_level": "read_committed", "partitioner": object()}, "client_configs")


def test_a_password_of_the_wrong_type_is_not_shown():
    with pytest.raises(ConfigError) as raised:
        check_client_settings({"sasl_plain_password": 123456}, "client_configs")
    assert "123456" not in str(raised.value) and "***" in str(raised.value)


@pytest.mark.parametrize(("key", "hint"), [("bootstrap_servers", "StreamsConfig.bootstrap_servers"),
                                           ("group_id", "application_id"),
                                           ("group_instance_id", "StreamsConfig.group_instance_id"),
                                           ("enable_auto_commit", "commits offsets itself"),
                                           ("value_deserializer", "serdes"),
                                           ("transactional_id", "exactly_once_v2")])
def test_settings_the_engine_decides_are_refused(key, hint):
    with pytest.raises(ConfigError, match=f"consumer_configs: '{key}' cannot be set: .*{hint}"):
        check_engine_settings({key: "x"}, "consumer_configs", exactly_once=False)


def test_exactly_once_needs_idempotence_and_read_committed():
    check_engine_settings({"enable_idempotence": False, "isolation_level": "read_uncommitted"}, "x",
                          exactly_once=False)
    check_engine_settings({"enable_idempotence": True, "isolation_level": "read_committed"}, "x", exactly_once=True)
    with pytest.raises(ConfigError, match="isolation_level='read_uncommitted' contradicts processing_guarantee"):
        check_engine_settings({"isolation_level": "read_uncommitted"}, "x", exactly_once=True)


def test_consumer_timeouts_must_be_ordered_as_kafka_python_demands():
    check_consumer_timeouts({}, "x")
    check_consumer_timeouts({"request_timeout_ms": 600}, "x")
    with pytest.raises(ConfigError, match="fetch_max_wait_ms < request_timeout_ms < connections_max_idle_ms, "
                                          "got 500 / 500 / 540000"):
        check_consumer_timeouts({"request_timeout_ms": 500}, "x")
    with pytest.raises(ConfigError, match="got 500 / 30000 / 20000"):
        check_consumer_timeouts({"connections_max_idle_ms": 20_000}, "x")


def test_each_client_gets_the_settings_it_knows():
    settings = {"session_timeout_ms": 10_000, "linger_ms": 5, "request_timeout_ms": 20_000,
                "allow_auto_create_topics": False}
    assert settings_for(CONSUMER, settings) == {"session_timeout_ms": 10_000, "request_timeout_ms": 20_000,
                                                "allow_auto_create_topics": False}
    assert settings_for(PRODUCER, settings) == {"linger_ms": 5, "request_timeout_ms": 20_000,
                                                "allow_auto_create_topics": False}
    assert settings_for(ADMIN, settings) == {"request_timeout_ms": 20_000}
    with pytest.raises(ConfigError, match="'lingr_ms' is not a kafka-python client setting"):
        settings_for(ADMIN, {"lingr_ms": 5})


def test_a_short_lived_client_gets_only_its_settings():
    """One set of client configs serves a reader's consumer and a command's producer: a
    consumer setting must not make the producer fail with kafka-python's "Unrecognized configs"."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        unreachable = f"127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(KafkaTimeoutError):
        construct_client(KafkaProducer, {"bootstrap_servers": unreachable, "bootstrap_timeout_ms": 200,
                                         "session_timeout_ms": 10_000})
    with pytest.raises(ConfigError, match="'sesion_timeout_ms' is not a kafka-python client setting"):
        construct_client(KafkaProducer, {"bootstrap_servers": unreachable, "sesion_timeout_ms": 10_000})
