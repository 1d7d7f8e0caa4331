"""The status topic on a real broker: publishers of two (fake) instances, the reader's snapshot
with live changelog end offsets, tombstones, staleness, the unknown-application and
unreachable-broker errors, and the document of a real KafkaStreams instance."""

from __future__ import annotations

import functools
import socket
import threading
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import ConfigResource, ConfigResourceType

from airflow_stateful_provider.streams.errors import BrokerUnreachableError, UnknownApplicationError
from airflow_stateful_provider.streams.status.publisher import (
    StatusPublisher,
    ensure_control_topic,
    ensure_status_topic,
)
from airflow_stateful_provider.streams.status.reader import fetch_application_status, read_status_documents
from tools.kafka.topics import create_topics, produce
from tools.waits import wait_until

pytestmark = pytest.mark.kafka


@pytest.fixture
def app() -> str:
    return f"status-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admin(bootstrap_servers):
    client = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    yield client
    client.close()


def document(app: str, instance_id: str, tasks: list[dict]) -> dict:
    return {"format_version": 1, "instance_id": instance_id, "application_id": app, "state": "REBALANCING",
            "epoch": 1, "host": f"host-{instance_id}", "pid": 4242, "process_id": f"uuid-{instance_id}",
            "generation": 5, "next_probing_rebalance_ms": None, "published_at": 0, "tasks": tasks,
            "acknowledgements": []}


def task(task_id: str, role: str, state: str, *changelogs: tuple) -> dict:
    return {"task_id": task_id, "role": role, "state": state, "changelogs": [
        {"topic": topic, "partition": partition, "store": "counts", "start_offset": start, "current_offset": current,
         "end_offset": end, "restore_rate": rate} for topic, partition, start, current, end, rate in changelogs]}


def topic_config(admin, topic: str) -> dict:
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    return {key: data.get("value") if isinstance(data, dict) else data
            for key, data in described["topic"][topic].items()}


def test_two_instances_publish_and_the_reader_builds_the_snapshot(bootstrap_servers, admin, app):
    assert ensure_status_topic(admin, app) is True
    assert ensure_status_topic(admin, app) is False
    assert ensure_control_topic(admin, app) is True
    assert topic_config(admin, f"{app}-status")["cleanup.policy"] == "compact"
    assert topic_config(admin, f"{app}-control")["cleanup.policy"] == "delete"
    changelog = f"{app}-counts-changelog"
    create_topics(bootstrap_servers, {changelog: 2})
    produce(bootstrap_servers, changelog, [(f"k{i}", b"v") for i in range(100)], partition=0)
    produce(bootstrap_servers, changelog, [(f"k{i}", b"v") for i in range(50)], partition=1)

    a = StatusPublisher(app, "i-a", lambda: document(app, "i-a", [
        task("0_0", "active", "restoring", (changelog, 0, 0, 40, 100, 20.0)),
        task("0_1", "standby", "running", (changelog, 1, 0, 30, 30, 0.0)),
    ]), bootstrap_servers=bootstrap_servers, status_interval_ms=200)
    b = StatusPublisher(app, "i-b", lambda: document(app, "i-b", [
        task("0_1", "active", "running"),
        task("0_0", "warmup", "running", (changelog, 0, 0, 10, 60, 0.0)),
    ]), bootstrap_servers=bootstrap_servers)
    try:
        a.start()
        b.publish()
        b.flush()
        wait_until(lambda: a.published_count >= 1, 10, "the first periodic publication")
        a.flush()
        status = fetch_application_status(bootstrap_servers, app, timeout_ms=10_000)
        assert [i.instance_id for i in status.instances] == ["i-a", "i-b"] and not status.stale_instances
        t0, t1 = status.task("0_0"), status.task("0_1")
        assert (t0.active.instance_id, t0.active.host, t0.state) == ("i-a", "host-i-a", "restoring")
        r = t0.restoration
        assert (r.restored, r.total, r.remaining, r.rate, r.eta_seconds) == (40, 100, 60, 20.0, 3.0)
        # lags against the live ends (100 and 50), not the reported ones (60 and 30)
        assert [(s.instance_id, s.warmup, s.lag, s.lag_basis) for s in t0.standbys] == [("i-b", True, 90, "live")]
        assert (t1.active.instance_id, t1.state) == ("i-b", "running")
        assert [(s.instance_id, s.warmup, s.lag, s.lag_basis) for s in t1.standbys] == [("i-a", False, 20, "live")]

        # the periodic thread keeps publishing: a newer document replaces the older one
        first = read_status_documents(bootstrap_servers, app)["i-a"].published_at
        wait_until(lambda: read_status_documents(bootstrap_servers, app)["i-a"].published_at > first, 10,
                   "a newer periodic document of i-a")

        b.close(clean=True)
        status = fetch_application_status(bootstrap_servers, app)
        assert [i.instance_id for i in status.instances] == ["i-a"]
        assert status.task("0_1").state == "unassigned" and status.task("0_0").standbys == ()
    finally:
        b.close()
        a.close(clean=True)
    with pytest.raises(UnknownApplicationError, match=rf"{app}.*every instance removed its document"):
        fetch_application_status(bootstrap_servers, app)
    assert read_status_documents(bootstrap_servers, app, allow_empty=True) == {}


def test_stale_documents_are_flagged(bootstrap_servers, admin, app):
    ensure_status_topic(admin, app)
    old = StatusPublisher(app, "i-old", lambda: document(app, "i-old", [task("0_0", "active", "running")]),
                          bootstrap_servers=bootstrap_servers, clock=lambda: time.time_ns() // 1_000_000 - 120_000)
    try:
        old.publish()
        old.flush()
        status = fetch_application_status(bootstrap_servers, app, stale_after_ms=60_000)
        assert [i.instance_id for i in status.stale_instances] == ["i-old"]
        assert status.task("0_0").state == "stale" and status.task("0_0").active.stale
        # a consumer factory instead of servers (the Airflow hook passes its security settings this way)
        factory = functools.partial(KafkaConsumer, bootstrap_servers=bootstrap_servers)
        relaxed = fetch_application_status(factory, app, stale_after_ms=300_000)
        assert not relaxed.stale_instances and relaxed.task("0_0").state == "running"
    finally:
        old.close(clean=False)  # a dirty close leaves its last document


def test_unknown_application_errors_name_the_application(bootstrap_servers, admin, app):
    with pytest.raises(UnknownApplicationError, match=rf"unknown application '{app}': no status topic '{app}-status'"):
        fetch_application_status(bootstrap_servers, app)
    ensure_status_topic(admin, app)
    with pytest.raises(UnknownApplicationError, match=rf"'{app}' has no live status documents.*topic is empty"):
        read_status_documents(bootstrap_servers, app)


def test_unreachable_broker_fails_fast_naming_the_servers(app):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(BrokerUnreachableError, match=rf"127\.0\.0\.1:{port}"):
        fetch_application_status(f"127.0.0.1:{port}", app, timeout_ms=2_000)
    assert time.monotonic() - started < 6
    # kafka-python leaves its IO thread running after a failed bootstrap unless told otherwise
    time.sleep(0.2)
    assert not [t.name for t in threading.enumerate() if app in t.name]
