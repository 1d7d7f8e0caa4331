"""A producer holding a batch for a partition without a leader waits for the metadata refresh,
it does not spin (kafka/metadata_requests.py). The topic is deleted under a producer that
has learned it, then written to: the batch waits for a leader that never comes. kafka-python's
sender asks for a metadata update on each pass, and each ask wakes the selector its pass
waits on: hundreds of passes per refresh, a core's worth. The engine's network client makes
a few. Counted in passes per metadata refresh, which does not depend on the machine's speed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kafka import KafkaProducer

from airflow_stateful_provider.streams.kafka.net_client import engine_net_client
from tests.integration.sender_passes import SenderPasses
from tools.kafka.topics import create_topics, delete_topics
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

#: The engine's sender: one pass for the refresh's timer, one for its answer, one for the
#: update it asks for then, a few for the retried batch. kafka-python's makes hundreds.
PASSES_PER_REFRESH = 20
WINDOW_SECONDS = 2.0


def batch_for_a_deleted_topic(bootstrap_servers: str, **client: Any) -> tuple[KafkaProducer, SenderPasses]:
    topic = f"deleted-under-producer-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {topic: 1})
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, delivery_timeout_ms=120_000, **client)
    producer.send(topic, b"delivered").get(timeout=30)
    counted = SenderPasses(producer, producer._metadata, "update_metadata")  # an answered refresh
    delete_topics(bootstrap_servers, [topic])
    waiting = producer.send(topic, b"waits for a leader")
    wait_until(lambda: producer._metadata.partitions_for_topic(topic) is None,
               timeout=60, what=f"the producer to learn that {topic} was deleted")
    assert not waiting.is_done
    return producer, counted


def close(producer: KafkaProducer) -> None:
    producer._sender.force_close()
    producer._sender.join(10)


def test_kafka_pythons_sender_spins_on_a_partition_without_a_leader(bootstrap_servers):
    """What the door works around: were this not so, the pacing would be dead code."""
    producer, counted = batch_for_a_deleted_topic(bootstrap_servers)
    try:
        passes, refreshes = counted.sample(WINDOW_SECONDS)
        assert passes > PASSES_PER_REFRESH * (refreshes + 1), (passes, refreshes)
    finally:
        close(producer)


def test_the_engines_sender_waits_for_the_metadata_refresh(bootstrap_servers):
    producer, counted = batch_for_a_deleted_topic(bootstrap_servers, kafka_client=engine_net_client)
    try:
        passes, refreshes = counted.sample(WINDOW_SECONDS)
        assert refreshes > 0  # the loop still asks, at its backoff
        assert passes <= PASSES_PER_REFRESH * (refreshes + 1), (passes, refreshes)
    finally:
        close(producer)
