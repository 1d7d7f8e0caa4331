"""A consumer that has joined its group, for tests whose transactions carry a member's group
metadata (KIP-447 fencing)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from kafka import KafkaConsumer

from tools.waits import wait_until


@contextmanager
def joined_consumer(bootstrap_servers: str, topic: str) -> Iterator[KafkaConsumer]:
    """A consumer of ``topic`` in a new group, joined, closed when the block ends. It knows the
    topic's partitions before it subscribes: a first join without them assigned nothing and
    rejoined, and kafka-python 3.0.12's second join sometimes never completed (no assignment
    for 60 s after "performing partition assignments"; 2 full runs of 4)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=f"g-{uuid.uuid4().hex[:8]}",
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        wait_until(lambda: bool(consumer.partitions_for_topic(topic)), 30, f"the consumer to know {topic}'s partitions")
        consumer.subscribe([topic])
        wait_until(lambda: bool(consumer.poll(timeout_ms=200)) or bool(consumer.assignment()), 60,
                   "the group is joined")
        yield consumer
    finally:
        consumer.close(autocommit=False)
