"""``stateful_streams`` connections to a secured broker (mutual TLS; SASL OAUTHBEARER over TLS
with a fixed token or a token provider), through the hook, a sensor and the engine; and what
each bad credential does: a bounded failure that says why, nothing created on the broker.
The broker is the session's second one (``secured_kafka``); the oracles read through its
plaintext listener. The same connection through SubmitTopologyOperator to instances on
Spark: tests/integration/test_secured_pipeline_lineage.py."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from airflow_stateful_provider.hooks.kafka_connection import client_configs_from_connection
from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.sensors.restoration import RestorationSensor
from airflow_stateful_provider.streams import BrokerUnreachableError, KafkaStreams, KafkaStreamsState, StreamsConfig
from airflow_stateful_provider.streams.kafka.socket_reads import install_socket_reads
from tests.integration.secured_kafka import TOKEN_PROVIDER, expired_token, fresh_token
from tests.integration.topologies import json_counts
from tools.kafka.topics import create_topics, read_all
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

CONN_ID = "secured"
#: How long a failing connection test may take: its bound, plus the slack of a busy machine.
TEST_BOUND_S = 5


def use(monkeypatch, connection: dict) -> StatefulStreamsHook:
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(connection))
    return StatefulStreamsHook(CONN_ID)


def connection_of(secured_kafka, kind: str) -> dict:
    return {"mtls": secured_kafka.mtls(), "oauth-token": secured_kafka.oauth(token=fresh_token()),
            "oauth-provider": secured_kafka.oauth(provider=TOKEN_PROVIDER)}[kind]


def engine_settings(connection: dict) -> dict:
    """StreamsConfig values for an instance on the connection (what the submit operator builds)."""
    configs = client_configs_from_connection(type("Conn", (), {
        "conn_id": CONN_ID, "host": connection["host"], "port": None, "login": None,
        "password": connection.get("password"), "extra_dejson": connection["extra"]})())
    return {"bootstrap_servers": configs.pop("bootstrap_servers"), "client_configs": configs}


@pytest.mark.parametrize("kind", ["mtls", "oauth-token", "oauth-provider"])
def test_the_hook_writes_and_reads_through_a_secured_listener(secured_kafka, monkeypatch, kind):
    hook = use(monkeypatch, connection_of(secured_kafka, kind))
    ok, message = hook.test_connection()
    assert ok, message
    topic = f"secured-{kind}-{uuid.uuid4().hex[:6]}"
    create_topics(secured_kafka.plaintext, {topic: 1})
    producer = hook.get_producer(acks="all")
    try:
        for i in range(3):
            producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
        producer.flush(timeout=30)
    finally:
        producer.close()
    assert [r.value for r in read_all(secured_kafka.plaintext, topic)] == [b"v0", b"v1", b"v2"]
    from kafka import TopicPartition

    consumer = hook.get_consumer(enable_auto_commit=False)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        seen: list[bytes] = []
        wait_until(lambda: seen.extend(r.value for batch in consumer.poll(timeout_ms=500).values() for r in batch)
                   or len(seen) >= 3, 30, "the records read back through the secured listener")
        assert seen == [b"v0", b"v1", b"v2"]
    finally:
        consumer.close()


@pytest.mark.parametrize("kind, reason", [
    # the broker's TLS alert for a client certificate of an unknown CA
    ("untrusted certificate", r"SSLV3_ALERT_(CERTIFICATE_UNKNOWN|BAD_CERTIFICATE)"),
    ("expired token", "invalid_token"),
    ("certificate for another host", r"IP address mismatch, certificate is not valid for '127\.0\.0\.1'"),
])
def test_a_credential_the_broker_refuses_fails_in_bounded_time_saying_why(secured_kafka, monkeypatch, kind, reason):
    connection = {
        "untrusted certificate": secured_kafka.mtls(ssl_certfile=str(secured_kafka.stranger.cert),
                                                    ssl_keyfile=str(secured_kafka.stranger.key), ssl_password=None),
        "expired token": secured_kafka.oauth(token=expired_token()),
        "certificate for another host": secured_kafka.wrong_name(),
    }[kind]
    connection["extra"] = {k: v for k, v in connection["extra"].items() if v is not None}
    started = time.monotonic()
    ok, message = use(monkeypatch, connection).test_connection(timeout=3)
    assert not ok
    assert time.monotonic() - started < 3 + TEST_BOUND_S
    assert "cannot reach Kafka at 127.0.0.1:" in message and re.search(reason, message), message


def test_the_host_name_check_can_be_turned_off_for_certificates_without_the_brokers_names(secured_kafka,
                                                                                        monkeypatch):
    ok, message = use(monkeypatch, secured_kafka.wrong_name(ssl_check_hostname=False)).test_connection()
    assert ok, message


def test_a_wrong_key_password_is_named_before_any_connection(secured_kafka, monkeypatch):
    started = time.monotonic()
    ok, message = use(monkeypatch, secured_kafka.mtls(ssl_password="not-the-password")).test_connection()
    assert not ok and time.monotonic() - started < TEST_BOUND_S
    assert f"ssl_certfile '{secured_kafka.client.cert}'" in message and "cannot be loaded with ssl_password" in message
    assert "not-the-password" not in message


@pytest.mark.parametrize("engine_kind, sensor_kind", [("mtls", "mtls"), ("oauth-provider", "oauth-token")])
def test_an_instance_runs_on_a_secured_listener_and_the_sensor_sees_it_restored(secured_kafka, monkeypatch, tmp_path,
                                                                                engine_kind, sensor_kind):
    app = f"secured-{engine_kind}-{uuid.uuid4().hex[:6]}"
    source, sink = f"{app}-in", f"{app}-out"
    create_topics(secured_kafka.plaintext, {source: 2, sink: 2})
    config = StreamsConfig.from_mapping({
        "application_id": app, "state_dir": str(tmp_path / "state"), "commit_interval_ms": 200,
        "status_interval_ms": 300, **engine_settings(connection_of(secured_kafka, engine_kind))})
    streams = KafkaStreams(json_counts(source, sink), config)
    streams.start()
    try:
        streams.wait_for_state(KafkaStreamsState.RUNNING, timeout=60)
        hook = use(monkeypatch, connection_of(secured_kafka, sensor_kind))
        producer = hook.get_producer()
        for key in ("a", "b", "a", "c", "a"):
            producer.send(source, key=key.encode(), value=b"{}")
        producer.flush(timeout=30)
        producer.close()

        def counts() -> dict[str, int]:
            return {r.key.decode(): int.from_bytes(r.value, "big") for r in read_all(secured_kafka.plaintext, sink)}

        wait_until(lambda: counts() == {"a": 3, "b": 1, "c": 1}, 60, "the counts of the five records",
                   on_timeout=lambda: str(counts()))
        sensor = RestorationSensor(task_id="restored", application_id=app, stateful_streams_conn_id=CONN_ID,
                                   poke_interval=1, timeout=60)
        wait_until(lambda: sensor.poke({}), 30, "the sensor to see every task restored and running")
    finally:
        streams.close(timeout=30)


@pytest.fixture(params=["on_time", "late"])
def network_thread(request, monkeypatch) -> str:
    """"late": kafka-python's network thread reads each socket 0.3 s after it became readable,
    later than the broker's close after a failed authentication (100 ms), as on a loaded
    machine, where the broker's answer used to be lost to "socket disconnected"."""
    if request.param == "late":
        from kafka.net.transport import KafkaSSLTransport

        install_socket_reads()  # installed first, so that the monkeypatch undoes only the delay
        read = KafkaSSLTransport._sock_recv

        def late(transport):
            time.sleep(0.3)
            return read(transport)

        monkeypatch.setattr(KafkaSSLTransport, "_sock_recv", late)
    return request.param


def test_an_instance_with_an_expired_token_creates_nothing_and_says_why(secured_kafka, tmp_path, network_thread):
    app = f"secured-expired-{uuid.uuid4().hex[:6]}"
    create_topics(secured_kafka.plaintext, {f"{app}-in": 1, f"{app}-out": 1})
    settings = engine_settings(secured_kafka.oauth(token=expired_token()))
    settings["client_configs"]["bootstrap_timeout_ms"] = 3_000
    streams = KafkaStreams(json_counts(f"{app}-in", f"{app}-out"),
                           StreamsConfig.from_mapping({"application_id": app, "state_dir": str(tmp_path), **settings}))
    started = time.monotonic()
    with pytest.raises(BrokerUnreachableError, match="invalid_token") as info:
        streams.start()
    assert time.monotonic() - started < 3 + TEST_BOUND_S
    assert "nothing was created" in str(info.value)
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=secured_kafka.plaintext)
    try:
        assert sorted(t for t in admin.list_topics() if t.startswith(app)) == [f"{app}-in", f"{app}-out"]
    finally:
        admin.close()
