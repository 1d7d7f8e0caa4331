"""StatefulStreamsHook's control commands on the real broker: the command lands on the
control topic as sent, and wait_for_command sees a (fake) instance acknowledge it."""

from __future__ import annotations

import json
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.streams.control.commands import ControlCommand
from airflow_stateful_provider.streams.errors import UnknownApplicationError
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

        pending = hook.wait_for_command(command, instances=["i-1"], timeout=1_000)
        assert not pending.complete and pending.missing == ("i-1",)

        publisher.acknowledge(command.command_id, "done", {"checkpointed": 2}, publish=False)
        publisher.publish()
        publisher.flush()
        outcome = hook.wait_for_command(command, instances=["i-1"], timeout=10_000)
    assert outcome.complete and outcome.succeeded
    assert outcome.acknowledgements["i-1"].result == {"checkpointed": 2}


def test_send_command_to_an_unknown_application_names_it(hook):
    with pytest.raises(UnknownApplicationError, match="no control topic 'never-started-control'"):
        hook.send_command("never-started", "checkpoint")
