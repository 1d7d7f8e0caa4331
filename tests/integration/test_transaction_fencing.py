"""A consumer that is no longer a member of its group never commits a transaction.

The group coordinator fences a transaction's offsets by the group generation they carry
(KIP-447), but it takes transactional offsets without a generation (-1, no member id, the
form of producers older than KIP-447) even while the group has members. kafka-python 3.0.12
reports exactly that as ``group_metadata()`` once a heartbeat was answered UNKNOWN_MEMBER_ID
(the member was expelled, e.g. after a group coordinator moved), until the next poll tells
the stream thread its partitions are lost. The first test shows the broker's side on a real
broker; the second that the engine's producer refuses such a commit and commits nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kafka import ConsumerGroupMetadata, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from airflow_stateful_provider.streams.errors import TransactionFailedError
from airflow_stateful_provider.streams.processing.streams_producer import StreamsProducer
from tests.integration.group_member import joined_consumer
from tools.kafka.topics import create_topics, produce, read_all
from tools.waits import wait_until

pytestmark = pytest.mark.kafka


@pytest.fixture
def topics(bootstrap_servers) -> tuple[str, str]:
    """(input, sink): one partition each, one input record."""
    source, sink = f"fencing-in-{uuid.uuid4().hex[:8]}", f"fencing-out-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {source: 1, sink: 1})
    produce(bootstrap_servers, source, [(b"k", b"v")])
    return source, sink


@pytest.fixture
def member(bootstrap_servers, topics) -> Iterator[KafkaConsumer]:
    with joined_consumer(bootstrap_servers, topics[0]) as consumer:
        yield consumer


def expelled(member: KafkaConsumer) -> ConsumerGroupMetadata:
    """The group metadata kafka-python 3.0.12 reports for ``member``'s consumer after the
    coordinator answered UNKNOWN_MEMBER_ID: its group, no generation, no member id."""
    return ConsumerGroupMetadata(group_id=member.config["group_id"])


def test_the_broker_takes_transactional_offsets_without_a_generation_while_the_group_has_a_member(
        bootstrap_servers, topics, member):
    source, sink = topics
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, transactional_id=f"tx-{uuid.uuid4().hex[:8]}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(sink, key=b"k", value=b"from a member that left")
        producer.send_offsets_to_transaction({TopicPartition(source, 0): OffsetAndMetadata(1, "", -1)},
                                             expelled(member))
        producer.commit_transaction()
    finally:
        producer.close(timeout=10)
    assert member.group_metadata().generation_id >= 0, "the member is still in its group"
    committed_eventually(member, TopicPartition(source, 0), 1)  # unfenced
    assert [r.value for r in read_all(bootstrap_servers, sink)] == [b"from a member that left"]


def test_the_engine_commits_nothing_for_a_consumer_outside_its_group(bootstrap_servers, topics, member):
    source, sink = topics
    producer = StreamsProducer(lambda **overrides: KafkaProducer(bootstrap_servers=bootstrap_servers, **overrides),
                               client_id="fencing", transactional_id=f"tx-{uuid.uuid4().hex[:8]}")
    offsets = {TopicPartition(source, 0): OffsetAndMetadata(1, "", -1)}
    try:
        producer.send(sink, key=b"k", value=b"processed by a member that left")
        with pytest.raises(TransactionFailedError, match="no longer a member of its group") as refused:
            producer.commit_transaction(offsets, expelled(member))
        assert refused.value.migrated
        assert member.committed(TopicPartition(source, 0)) is None

        producer.send(sink, key=b"k", value=b"processed by the member")
        producer.commit_transaction(offsets, member.group_metadata())
    finally:
        producer.close(timeout=10)
    committed_eventually(member, TopicPartition(source, 0), 1)
    assert [r.value for r in read_all(bootstrap_servers, sink)] == [b"processed by the member"]


def committed_eventually(member: KafkaConsumer, tp: TopicPartition, offset: int) -> None:
    """Until ``member``'s group shows ``offset`` committed for ``tp``: a commit returns once
    the transaction coordinator decided, and its markers reach the offsets a moment later."""
    wait_until(lambda: member.committed(tp) == offset, 30, f"offset {offset} of {tp} committed")
