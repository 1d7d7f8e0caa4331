"""A partition paused in the middle of a fetched batch and resumed gets all its records
(kafka-python 3.0.12 otherwise parks the rest of the batch for good: kafka/parked_fetches.py)."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition

from airflow_stateful_provider.streams.kafka.parked_fetches import release_parked_fetches
from tools.kafka.topics import create_topics, produce
from tools.waits import wait_until

pytestmark = pytest.mark.kafka


def test_a_partition_paused_mid_batch_and_resumed_is_read_to_its_end(bootstrap_servers):
    topic = f"parked-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {topic: 2})
    large_batches = {"linger_ms": 50, "batch_size": 1024 * 1024}
    produce(bootstrap_servers, topic, [(None, b"a%d" % i) for i in range(3000)], partition=0, **large_batches)
    produce(bootstrap_servers, topic, [(None, b"b%d" % i) for i in range(150)], partition=1, **large_batches)

    a, b = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    seen = {a: 0, b: 0}

    def poll() -> None:
        release_parked_fetches(consumer)  # what the stream thread does before every poll
        for tp, records in consumer.poll(timeout_ms=200, max_records=100).items():
            seen[tp] += len(records)

    try:
        consumer.assign([a, b])
        consumer.seek_to_beginning(a, b)
        consumer.pause(b)
        wait_until(lambda: poll() or seen[a] > 0, 30, "the first records of partition 0")
        consumer.pause(a)  # mid-batch: the rest of partition 0's fetched batch is parked
        consumer.resume(b)
        wait_until(lambda: poll() or seen[b] == 150, 30, "every record of partition 1")
        for _ in range(3):
            poll()  # partition 1's used-up batch stays in the fetcher's in-line slot
        consumer.resume(a)
        wait_until(lambda: poll() or seen[a] == 3000, 30, "every record of partition 0 after the resume",
                   lambda: f"read {seen[a]} of 3000")
    finally:
        consumer.close()
