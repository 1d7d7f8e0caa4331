"""Exactly-once: the transaction coordinator aborts a transaction that stayed open past its
timeout (a processor held the stream thread) and bumps the producer's epoch. The thread
must roll its tasks back to the last commit and go on, as Kafka Streams does
(TaskMigratedException): nothing lost, nothing duplicated in the read_committed output.

What used to go wrong here, each on its own: a send failing asynchronously with
InvalidProducerEpoch stopped the thread (ProductionError inside processing); a commit
waited in ``flush()`` for records kafka-python keeps queued after its epoch bump until
their delivery timeout (2 minutes); and the rolled-back task's input partition stayed
paused in the consumer for good, so the revived task never got a record again."""

from __future__ import annotations

import threading
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreams, KafkaStreamsState
from tools.kafka.topics import committed_offsets, create_topics, produce
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

TRANSACTION_TIMEOUT_MS = 2_000
RECORDS = 3_000
STALL_AT = 10


def no_open_transaction(bootstrap_servers: str, tp: TopicPartition) -> bool:
    """The partition has records and none of them in an open transaction (last stable offset
    = high watermark): the coordinator has written the abort marker."""
    consumers = [KafkaConsumer(bootstrap_servers=bootstrap_servers, isolation_level=level)
                 for level in ("read_uncommitted", "read_committed")]
    try:
        high_watermark, last_stable = (c.end_offsets([tp])[tp] for c in consumers)
    finally:
        for consumer in consumers:
            consumer.close()
    return high_watermark > 0 and last_stable == high_watermark


def test_a_transaction_aborted_by_its_timeout_is_rolled_back_and_processing_goes_on(bootstrap_servers, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"tx-in-{suffix}", f"tx-out-{suffix}"
    create_topics(bootstrap_servers, {source: 1, sink: 1})
    produce(bootstrap_servers, source, [(b"k", str(i)) for i in range(RECORDS)])

    stalled = threading.Event()

    def stall_once(key, value):
        """After record STALL_AT went out in the open transaction: wait, holding the stream
        thread, until the coordinator has aborted that transaction."""
        if value == str(STALL_AT) and not stalled.is_set():
            stalled.set()
            wait_until(lambda: no_open_transaction(bootstrap_servers, TopicPartition(sink, 0)), 60,
                       "the coordinator aborts the timed-out transaction", interval=0.5)

    builder = StreamsBuilder()
    stream = builder.stream(source, Consumed.with_("string", "string"))
    stream.to(sink, Produced.with_("string", "string"))  # sent first: the transaction is open
    stream.foreach(stall_once)
    config = StreamsConfig(application_id=f"tx-timeout-{suffix}", bootstrap_servers=bootstrap_servers,
                           state_dir=str(tmp_path), processing_guarantee="exactly_once_v2",
                           commit_interval_ms=200, producer_configs={"transaction_timeout_ms": TRANSACTION_TIMEOUT_MS})
    streams = KafkaStreams(builder.build(), config)
    streams.start()
    try:
        wait_until(lambda: committed_offsets(bootstrap_servers, config.application_id, source) == {0: RECORDS}
                   or streams.state in (KafkaStreamsState.ERROR, KafkaStreamsState.PENDING_ERROR),
                   90, "every input record committed", lambda: f"state {streams.state}, committed "
                   f"{committed_offsets(bootstrap_servers, config.application_id, source)}")
        assert stalled.is_set()
        assert streams.state is KafkaStreamsState.RUNNING, f"the instance stopped: {streams.state}"
    finally:
        streams.close(timeout=30)

    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3_000)
    consumer.assign([TopicPartition(sink, 0)])
    values = [record.value.decode() for record in consumer]
    consumer.close()
    assert values == [str(i) for i in range(RECORDS)]
