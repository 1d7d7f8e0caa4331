"""Clients of a frozen broker (SIGSTOP: connections accepted, nothing answered, as in a long
pause or behind a partition) wait, they do not spin. Counted in passes over a window: a busy
machine can only lower the count.

- A producer with a batch for it (kafka/connection_delay.py): its request times out, its new
  connection is set up but never answered; kafka-python's sender polls for 0 ms all the while,
  a core's worth; the engine's polls at most once a reconnect backoff, and the answer or
  failure of the connection ends its poll sooner.
- A consumer in a group whose heartbeat waits on it (kafka/heartbeat_in_flight.py): past the
  heartbeat interval kafka-python's poll fetches with a 0 ms wait until its timeout, thousands
  of rounds a second; the engine's waits out the poll's timeout in one round. Its offset
  commit (the at-least-once commit's call) ends at the bound it is given."""

from __future__ import annotations

import os
import signal
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError
from kafka.structs import OffsetAndMetadata

from airflow_stateful_provider.streams.kafka.clients import construct_client
from airflow_stateful_provider.streams.kafka.heartbeat_in_flight import heartbeat_in_flight
from airflow_stateful_provider.streams.kafka.net_client import engine_net_client
from tests.integration.sender_passes import SenderPasses
from tools.kafka.broker import LocalKafkaBroker
from tools.kafka.topics import create_topics
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

TOPIC = "frozen"
REQUEST_TIMEOUT_MS = 2000
BACKOFF_MAX_MS = 1000
WINDOW_SECONDS = 3.0
#: The engine's sender: about one pass per backoff while the connection is set up, a few for
#: each failure. kafka-python's: tens of thousands a second.
MOST_PASSES = 20 * WINDOW_SECONDS
HEARTBEAT_INTERVAL_MS = 300
#: The consumers' heartbeats stay in flight this long after the freeze: the consumer tests run
#: first, within seconds of it.
CONSUMER_REQUEST_TIMEOUT_MS = 120_000
POLL_TIMEOUT_MS = 100
COMMIT_BOUND_MS = 2000


@pytest.fixture(scope="module")
def frozen_broker(tmp_path_factory):
    """A broker, its consumers joined to their groups, then frozen (the producers' fixture
    thaws it for their first sends and freezes it again); thawed and stopped at the end."""
    broker = LocalKafkaBroker(work_dir=tmp_path_factory.mktemp("broker")).start()
    consumers: list[KafkaConsumer] = []
    try:
        create_topics(broker.bootstrap_servers, {TOPIC: 1})
        settings = {"bootstrap_servers": broker.bootstrap_servers, "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
                    "session_timeout_ms": 6000, "request_timeout_ms": CONSUMER_REQUEST_TIMEOUT_MS,
                    "enable_auto_commit": False}
        consumers = [KafkaConsumer(TOPIC, group_id="kafka-python", **settings),
                     construct_client(KafkaConsumer, {"group_id": "engine", **settings})]
        consumers[1].subscribe([TOPIC])
        for consumer in consumers:
            wait_until(lambda c=consumer: joined(c), timeout=60, what="the consumer to join its group")
        os.kill(broker.process.pid, signal.SIGSTOP)
        yield broker, consumers
    finally:
        for consumer in consumers:
            consumer._client.close()
        os.kill(broker.process.pid, signal.SIGCONT)
        broker.stop()


@pytest.fixture(scope="module")
def frozen_consumers(frozen_broker):
    """(kafka-python's, the engine's) consumers, each with a heartbeat to the frozen broker in
    flight for longer than the heartbeat interval."""
    consumers = frozen_broker[1]
    wait_until(lambda: all(heartbeat_overdue(c) for c in consumers), timeout=CONSUMER_REQUEST_TIMEOUT_MS / 2000,
               what="both consumers' heartbeats to wait on the frozen broker past the heartbeat interval")
    return consumers


def joined(consumer: KafkaConsumer) -> bool:
    """Polls once (joining takes polls); whether the consumer has its partition now."""
    consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
    return bool(consumer.assignment())


def heartbeat_overdue(consumer: KafkaConsumer) -> bool:
    heartbeat = consumer._coordinator.heartbeat
    return heartbeat_in_flight(heartbeat) and time.monotonic() - heartbeat.last_send > HEARTBEAT_INTERVAL_MS / 1000


def poll_rounds(consumer: KafkaConsumer) -> int:
    """Rounds of ``consumer``'s poll (fetches and their waits) over the window, polled with the
    stream thread's timeout, its heartbeat in flight throughout. Only rounds begun with at
    least 1 ms of the poll left count: kafka-python's Timer floors the time left to whole ms,
    so every poll, healthy broker or not, ends in rounds of 0 ms through its last ms (1.6 a
    poll of 100 ms on a healthy broker, more the faster the machine), which is not the spin
    asked about: rounds capped at 0 ms by the heartbeat while the poll has time left."""
    rounds = 0
    poll_once = consumer._poll_once

    def counted(timer, *args, **kwargs):
        nonlocal rounds
        if timer.timeout_ms > 0:
            rounds += 1
        return poll_once(timer, *args, **kwargs)

    consumer._poll_once = counted
    try:
        ends = time.monotonic() + WINDOW_SECONDS
        while time.monotonic() < ends:
            assert consumer.poll(timeout_ms=POLL_TIMEOUT_MS) == {}
    finally:
        del consumer._poll_once
    assert heartbeat_overdue(consumer), "the heartbeat was answered or failed within the window"
    return rounds


def test_kafka_pythons_consumer_spins_while_its_heartbeat_waits(frozen_consumers):
    """What heartbeat_in_flight.py works around: were this not so, it would be dead code."""
    assert poll_rounds(frozen_consumers[0]) > MOST_PASSES


def test_the_engines_consumer_waits_while_its_heartbeat_waits(frozen_consumers):
    assert poll_rounds(frozen_consumers[1]) <= MOST_PASSES


def test_an_offset_commit_to_the_frozen_coordinator_ends_at_its_bound(frozen_consumers):
    """The at-least-once commit passes its bound (instance/task_committer.py, the consumer's
    request timeout; tests/unit/streams/instance/test_offset_commit.py): against a coordinator
    that does not answer, the call fails once the bound has passed, with a retriable timeout
    the thread counts toward its task timeout."""
    consumer = frozen_consumers[1]
    (partition,) = consumer.assignment()
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError):
        consumer.commit({partition: OffsetAndMetadata(0, "", -1)}, timeout_ms=COMMIT_BOUND_MS)
    waited = time.monotonic() - started
    assert waited >= COMMIT_BOUND_MS / 1000 * 0.9, f"the commit gave up after {waited:.1f} s, before its bound"
    # not held until the consumer's own request timeout (the frozen request's)
    assert waited < CONSUMER_REQUEST_TIMEOUT_MS / 2000, f"the commit waited {waited:.1f} s"


@pytest.fixture(scope="module")
def frozen_producers(frozen_broker):
    """(kafka-python's, the engine's) producers, each with a batch for the frozen broker, past
    their request timeout: each sets up a connection the broker never answers."""
    broker = frozen_broker[0]
    os.kill(broker.process.pid, signal.SIGCONT)
    made: list[KafkaProducer] = []
    try:
        made = [KafkaProducer(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=REQUEST_TIMEOUT_MS,
                              reconnect_backoff_max_ms=BACKOFF_MAX_MS, delivery_timeout_ms=120_000, **client)
                for client in ({}, {"kafka_client": engine_net_client})]
        for producer in made:
            producer.send(TOPIC, b"delivered").get(timeout=30)
        os.kill(broker.process.pid, signal.SIGSTOP)
        waiting = [producer.send(TOPIC, b"waits for the broker") for producer in made]
        wait_until(lambda: all(setting_up(p) for p in made), timeout=60,
                   what="both producers to set up a new connection to the frozen broker")
        assert not any(future.is_done for future in waiting)
        yield made
    finally:
        for producer in made:
            producer._sender.force_close()
            producer._sender.join(10)


def setting_up(producer: KafkaProducer) -> bool:
    """A connection of the producer is being set up (its first one timed out and closed)."""
    return any(connection.initializing for connection in producer._sender._client._manager._conns.values())


def passes(producer: KafkaProducer) -> int:
    counted = SenderPasses(producer, producer._sender._client._manager, "update_backoff")
    return counted.sample(WINDOW_SECONDS)[0]


def test_kafka_pythons_sender_spins_while_a_connection_is_set_up(frozen_producers):
    """What connection_delay.py works around: were this not so, it would be dead code."""
    assert passes(frozen_producers[0]) > MOST_PASSES


def test_the_engines_sender_waits_while_a_connection_is_set_up(frozen_producers):
    assert setting_up(frozen_producers[1])
    assert passes(frozen_producers[1]) <= MOST_PASSES
