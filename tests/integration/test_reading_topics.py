"""tools/kafka/topics.read_all against a real broker, read_committed: a transaction committed
just before the read is in it (its markers land after ``commit_transaction`` returns), and an
open transaction is left out after a bounded wait."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from kafka import KafkaProducer

from tools.kafka import topics
from tools.kafka.topics import create_topics, read_all

pytestmark = pytest.mark.kafka

def _transactional_producer(bootstrap_servers: str) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, transactional_id=f"read-all-{uuid.uuid4().hex[:8]}")
    producer.init_transactions()
    return producer


def test_a_transaction_completing_after_the_read_began_is_in_it(bootstrap_servers):
    """What ``commit_transaction`` leaves for a moment (its markers land after it returns),
    made long: a transaction written before the read and committed 1.5 s into it. The read
    waits for it instead of stopping at the last stable offset it sees first."""
    topic = f"read-after-commit-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {topic: 2})
    producer = _transactional_producer(bootstrap_servers)
    late = threading.Timer(1.5, producer.commit_transaction)
    try:
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, value=b"%d" % i, partition=i % 2)
        producer.flush()
        late.start()
        began = time.monotonic()
        assert sorted(record.value for record in read_all(bootstrap_servers, topic)) == [b"%d" % i for i in range(10)]
        assert time.monotonic() - began >= 1.0
    finally:
        late.join(60)
        producer.close()


def test_an_open_transaction_is_left_out_after_the_settle_time(bootstrap_servers, monkeypatch):
    monkeypatch.setattr(topics, "TRANSACTIONS_SETTLE_SECONDS", 1.0)
    topic = f"read-open-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {topic: 1})
    producer = _transactional_producer(bootstrap_servers)
    try:
        producer.begin_transaction()
        producer.send(topic, value=b"committed")
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, value=b"open")
        producer.flush()
        began = time.monotonic()
        assert [record.value for record in read_all(bootstrap_servers, topic)] == [b"committed"]
        assert 1.0 <= time.monotonic() - began < 60
        assert [record.value for record in read_all(bootstrap_servers, topic, "read_uncommitted")] == \
            [b"committed", b"open"]
        producer.abort_transaction()
    finally:
        producer.close()
