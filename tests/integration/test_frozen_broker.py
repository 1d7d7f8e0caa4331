"""A producer with a batch for a frozen broker (SIGSTOP: connections accepted, nothing answered,
as in a long pause or behind a partition) waits, it does not spin (kafka/connection_delay.py).
Its request times out, its new connection is set up but never answered: kafka-python's sender
polls for 0 ms all the while, a core's worth; the engine's polls at most once a reconnect
backoff, and the answer or failure of the connection ends its poll sooner. Counted in sender
passes over a window: a busy machine can only lower the count."""

from __future__ import annotations

import os
import signal

import pytest
from kafka import KafkaProducer

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


@pytest.fixture(scope="module")
def frozen_producers(tmp_path_factory):
    """(kafka-python's, the engine's) producers, each with a batch for a frozen broker, past
    their request timeout: each sets up a connection the broker never answers."""
    broker = LocalKafkaBroker(work_dir=tmp_path_factory.mktemp("broker")).start()
    made: list[KafkaProducer] = []
    try:
        create_topics(broker.bootstrap_servers, {TOPIC: 1})
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
        os.kill(broker.process.pid, signal.SIGCONT)
        broker.stop()


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
