"""A producer whose records cannot be delivered still stops when closed (kafka/producer_close.py),
and waits out its broker's reconnect backoff meanwhile (kafka/connection_delay.py). The broker
stops after the producers learned their topic: what they send then waits for it.
kafka-python's ``close(timeout)`` raises and leaves its sender thread running (retrying and
logging for the life of the process); ``close_producer`` drops the records and stops it."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError

from airflow_stateful_provider.streams.kafka.net_client import engine_net_client
from airflow_stateful_provider.streams.kafka.producer_close import close_producer
from tests.integration.sender_passes import SenderPasses
from tools.kafka.broker import LocalKafkaBroker
from tools.kafka.topics import create_topics

pytestmark = pytest.mark.kafka

TOPIC = "outlived"


#: The reconnect backoff of the producers counted (the engine's default, kafka-python's is 30 s).
BACKOFF_MAX_MS = 1000
#: The engine's sender: a pass per reconnect attempt, a few for the attempt's answer and the
#: backoff's end. kafka-python's polls a thousandth of the backoff: hundreds per attempt.
PASSES_PER_ATTEMPT = 10


@pytest.fixture(scope="module")
def producers(tmp_path_factory):
    """Five producers that delivered a record, then lost their broker: (stuck, stuck, idle,
    kafka-python's stuck and counted, the engine's stuck and counted)."""
    broker = LocalKafkaBroker(work_dir=tmp_path_factory.mktemp("broker")).start()
    try:
        create_topics(broker.bootstrap_servers, {TOPIC: 1})
        made = [KafkaProducer(bootstrap_servers=broker.bootstrap_servers, reconnect_backoff_max_ms=200)
                for _ in range(3)]
        made += [KafkaProducer(bootstrap_servers=broker.bootstrap_servers, reconnect_backoff_max_ms=BACKOFF_MAX_MS,
                               **client) for client in ({}, {"kafka_client": engine_net_client})]
        for producer in made:
            producer.send(TOPIC, b"delivered").get(timeout=30)
    finally:
        broker.stop()
    for producer in made[:2] + made[3:]:
        producer.send(TOPIC, b"never delivered")
    yield made
    for producer in made:
        producer._sender.force_close()
        producer._sender.join(10)


def test_kafka_pythons_close_raises_and_leaves_the_sender_running(producers):
    """Why close_producer exists: were this not so, it would have nothing to do."""
    with pytest.raises(KafkaTimeoutError):
        producers[0].close(timeout=1)
    assert producers[0]._sender.is_alive()


def test_close_producer_drops_what_it_cannot_deliver_and_stops_the_sender(producers):
    started = time.monotonic()
    assert close_producer(producers[1], 1) is False
    assert time.monotonic() - started < 1 + 5 + 2  # the timeout, then at most the forced close's wait
    assert not producers[1]._sender.is_alive()


def test_a_producer_holding_nothing_closes_as_usual(producers):
    assert close_producer(producers[2], 10) is True
    assert not producers[2]._sender.is_alive()


def failed_attempts(producer: KafkaProducer) -> SenderPasses:
    """Its sender's passes against its failed connection attempts (each starts a backoff)."""
    return SenderPasses(producer, producer._sender._client._manager, "update_backoff")


def test_kafka_pythons_sender_polls_through_the_reconnect_backoff(producers):
    """What connection_delay.py works around: were this not so, it would be dead code."""
    passes, attempts = failed_attempts(producers[3]).sample(3)
    assert passes > PASSES_PER_ATTEMPT * (attempts + 1), (passes, attempts)


def test_the_engines_sender_waits_out_the_reconnect_backoff(producers):
    passes, attempts = failed_attempts(producers[4]).sample(3)
    assert attempts > 0  # it still tries to reconnect, once per backoff
    assert passes <= PASSES_PER_ATTEMPT * (attempts + 1), (passes, attempts)
