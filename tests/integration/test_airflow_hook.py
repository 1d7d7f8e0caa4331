"""StatefulStreamsHook's control commands on the real broker: the command lands on the
control topic as sent, and wait_for_command sees a (fake) instance acknowledge it. Every
duration the hook takes is seconds (Airflow's convention): an int timeout is waited in
seconds against the broker (and against a listener that never answers, for the reads that
a healthy broker answers at once)."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.streams.control.commands import ControlCommand
from airflow_stateful_provider.streams.errors import (
    BrokerUnreachableError,
    QueryTimeoutError,
    StatusReadTimeoutError,
    UnknownApplicationError,
)
from airflow_stateful_provider.streams.queries.wire import answers_topic_name, queries_topic_name
from airflow_stateful_provider.streams.status.publisher import (
    StatusPublisher,
    ensure_control_topic,
    ensure_status_topic,
)

pytestmark = pytest.mark.kafka


@pytest.fixture
def hook(bootstrap_servers, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT",
                       json.dumps({"conn_type": "stateful_streams", "host": bootstrap_servers}))
    return StatefulStreamsHook()


def control_records(bootstrap_servers: str, app: str) -> list[ControlCommand]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    tp = TopicPartition(f"{app}-control", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    records = []
    while consumer.position(tp) < end:
        for batch in consumer.poll(timeout_ms=1_000).values():
            records += batch
    consumer.close()
    return [ControlCommand.from_json_bytes(r.value) for r in records]


def test_send_command_and_wait_for_the_acknowledgement(bootstrap_servers, hook):
    app = f"hook-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        ensure_status_topic(admin, app)
        ensure_control_topic(admin, app)
    finally:
        admin.close()
    document = {"format_version": 1, "instance_id": "i-1", "application_id": app, "state": "RUNNING", "epoch": 1,
                "host": "h", "pid": 1, "process_id": "p", "generation": 1, "next_probing_rebalance_ms": None,
                "published_at": 0, "tasks": [], "acknowledgements": []}
    with StatusPublisher(app, "i-1", lambda: document, bootstrap_servers=bootstrap_servers) as publisher:
        publisher.publish()
        publisher.flush()
        command = hook.send_command(app, "checkpoint", instances=["i-1"])
        assert control_records(bootstrap_servers, app) == [command]

        started = time.monotonic()
        # seconds, not ms; 5 s: one read of the status topic must fit in it on a loaded machine
        # (a 2 s bound failed there: the first metadata request alone took longer)
        pending = hook.wait_for_command(command, instances=["i-1"], timeout=5)
        waited = time.monotonic() - started
        assert not pending.complete and pending.missing == ("i-1",)
        assert 5 <= waited < 20, waited

        publisher.acknowledge(command.command_id, "done", {"checkpointed": 2}, publish=False)
        publisher.publish()
        publisher.flush()
        outcome = hook.wait_for_command(command, instances=["i-1"], timeout=10)
    assert outcome.complete and outcome.succeeded
    assert outcome.acknowledgements["i-1"].result == {"checkpointed": 2}


def test_send_command_to_an_unknown_application_names_it(hook):
    with pytest.raises(UnknownApplicationError, match="no control topic 'never-started-control'"):
        hook.send_command("never-started", "checkpoint")


def published_document(app: str, published_at: int) -> dict:
    return {"format_version": 1, "instance_id": "i-1", "application_id": app, "state": "RUNNING", "epoch": 1,
            "host": "h", "pid": 1, "process_id": "p", "generation": 1, "next_probing_rebalance_ms": None,
            "published_at": published_at, "tasks": [], "acknowledgements": []}


def test_int_stale_after_and_timeouts_are_seconds_against_the_broker(bootstrap_servers, hook):
    """A document published 5 s ago is fresh under stale_after=60 and stale under stale_after=2
    (under the old milliseconds both were stale); query_store(timeout=2) waits 2 s for an answer."""
    app = f"hook-s-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        ensure_status_topic(admin, app)
        ensure_control_topic(admin, app)
        from kafka.admin import NewTopic

        admin.create_topics([NewTopic(queries_topic_name(app), 1, 1), NewTopic(answers_topic_name(app), 1, 1)])
    finally:
        admin.close()
    five_s_ago = int(time.time() * 1000) - 5_000
    with StatusPublisher(app, "i-1", lambda: published_document(app, five_s_ago), clock=lambda: five_s_ago,
                         bootstrap_servers=bootstrap_servers) as publisher:
        publisher.publish()
        publisher.flush()
        assert [i.stale for i in hook.get_status(app, stale_after=60, timeout=10).instances] == [False]
        assert [i.stale for i in hook.get_status(app, stale_after=2, timeout=10).instances] == [True]
        assert app in hook.list_applications(timeout=10)
        started = time.monotonic()
        with pytest.raises(QueryTimeoutError, match="within 2000 ms"):
            hook.query_store(app, "counts", "k", timeout=2)
        assert 2 <= time.monotonic() - started < 8


@contextmanager
def silent_listener() -> Iterator[str]:
    """A TCP port that accepts connections and never answers: every Kafka request on it waits
    for the caller's timeout."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in accepted:
            connection.close()
        server.close()


@pytest.mark.parametrize("call", ["test_connection", "get_status", "list_applications"])
def test_an_int_timeout_of_a_read_is_waited_in_seconds(monkeypatch, call):
    with silent_listener() as address:
        monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT",
                           json.dumps({"conn_type": "stateful_streams", "host": address}))
        hook = StatefulStreamsHook()
        started = time.monotonic()
        if call == "test_connection":
            ok, message = hook.test_connection(timeout=2)
            assert not ok and "within 2000 ms" in message
        else:
            with pytest.raises((BrokerUnreachableError, StatusReadTimeoutError)):
                getattr(hook, call)(*(("app",) if call == "get_status" else ()), timeout=2)
        waited = time.monotonic() - started
    assert 1.5 <= waited < 8, waited  # 2 s (kafka-python rounds its own waits), not 2 ms nor the default 10 s
