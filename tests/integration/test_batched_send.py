"""Records appended to a partition in one call (kafka/batched_send.py) land as
``KafkaProducer.send`` one by one would put them, and what send refuses is refused before
anything is appended; the collector's batching keeps each partition's order and the
production exception handler's view of a refused sink record."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError, MessageSizeTooLargeError

from airflow_stateful_provider.streams.errors import ProductionError
from airflow_stateful_provider.streams.kafka.batched_send import append_records, default_partition
from airflow_stateful_provider.streams.processing.error_handling import ErrorHandlerContext, HandlerResult
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.streams_producer import StreamsProducer
from tools.kafka.topics import create_topics, end_offsets, read_all

pytestmark = pytest.mark.kafka

T = 1_700_000_000_000
#: Small batches, so one call spans several producer batches.
SMALL_BATCHES = {"batch_size": 512, "linger_ms": 5}


def records(count: int, prefix: str = "k") -> list[tuple[bytes | None, bytes | None, int]]:
    return [(f"{prefix}{i}".encode(), None if i % 7 == 3 else b"v%d" % i, 1_700_000_000_000 + i)
            for i in range(count)]


def written(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None, int]]:
    return [(r.partition, r.key, r.value, r.timestamp) for r in read_all(bootstrap, topic)]


@pytest.fixture
def topic(bootstrap_servers) -> str:
    name = f"batched-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {name: 3})
    return name


@pytest.mark.parametrize("transactional", [False, True])
def test_appended_records_land_in_order_with_their_offsets(bootstrap_servers, topic, transactional):
    extra = {"transactional_id": f"batched-{uuid.uuid4().hex[:8]}"} if transactional else {}
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, **SMALL_BATCHES, **extra)
    failures: list[Exception] = []
    try:
        if transactional:
            producer.init_transactions()
            producer.begin_transaction()
        sent = records(300)
        producer.send(topic, key=b"before", value=b"x", partition=1, timestamp_ms=1)
        tracked = [0, 1, 37, 38, 200, 299]
        futures = append_records(producer, topic, 1, sent, tracked, failures.append)
        producer.send(topic, key=b"after", value=b"y", partition=1, timestamp_ms=2)
        if transactional:
            producer.commit_transaction()
        producer.flush()
        metadata = {i: f.get(timeout=30) for i, f in futures.items()}
        assert {i: (m.offset, m.timestamp, m.serialized_key_size, m.serialized_value_size)
                for i, m in metadata.items()} == {
            i: (i + 1, sent[i][2], len(sent[i][0]), -1 if sent[i][1] is None else len(sent[i][1])) for i in tracked}
    finally:
        producer.close()
    assert failures == []
    assert written(bootstrap_servers, topic) == ([(1, b"before", b"x", 1)] + [(1, k, v, t) for k, v, t in sent]
                                                 + [(1, b"after", b"y", 2)])


def test_a_batch_the_broker_finds_too_large_is_split_and_a_failed_part_is_reported(bootstrap_servers):
    """kafka-python splits a batch the broker refused as too large (MESSAGE_TOO_LARGE) and
    sends the halves: the records still land in order with their offsets, and the one record
    larger than the topic allows fails its last split batch, which on_failure hears although
    no future of its own was built for it."""
    topic = f"batched-small-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {topic: 1}, {topic: {"max.message.bytes": "3000"}})
    # one request at a time: the split batches go in order, so the last record's future is the
    # last to complete (and the producer's flush is not waiting on a batch it splits: in
    # kafka-python 3.0.12 that flush raises UnknownError 'Future not done')
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, batch_size=64_000, linger_ms=50,
                             max_in_flight_requests_per_connection=1)
    failures: list[Exception] = []
    try:
        fitting = [(b"k%d" % i, b"v" * 100, T + i) for i in range(120)]  # ~13 KiB: one batch, split in eight
        futures = append_records(producer, topic, 0, fitting, [0, 119], failures.append)
        assert futures[119].get(timeout=60).offset == 119 and futures[0].get(timeout=1).offset == 0
        assert failures == []
        too_large = [(b"a", b"v", T), (b"big", b"x" * 5_000, T + 1), (b"z", b"v", T + 2)]
        futures = append_records(producer, topic, 0, too_large, [2], failures.append)
        try:
            futures[2].get(timeout=60)  # in order: the too-large record's batch has completed
        except KafkaError:
            pass  # kafka-python 3.0.12 fails the record after it too, as after send()
    finally:
        producer.close()
    assert failures and all(isinstance(f, MessageSizeTooLargeError) for f in failures)
    landed = written(bootstrap_servers, topic)
    assert landed[:120] == [(0, k, v, t) for k, v, t in fitting]
    assert landed[120:] in ([(0, b"a", b"v", T)], [(0, b"a", b"v", T), (0, b"z", b"v", T + 2)])


def test_what_send_refuses_is_refused_before_anything_is_appended(bootstrap_servers, topic):
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, max_request_size=10_000, **SMALL_BATCHES)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            append_records(producer, topic, 0, [*records(5), (b"big", b"x" * 20_000, 5)], [], print)
        with pytest.raises(ValueError, match=f"Unrecognized partition 3 for topic {topic}"):
            append_records(producer, topic, 3, records(5), [], print)
        append_records(producer, topic, 0, [(b"last", b"v", 9)], [0], print)
        producer.flush()
    finally:
        producer.close()
    assert written(bootstrap_servers, topic) == [(0, b"last", b"v", 9)]


def test_the_default_partition_is_the_one_send_picks(bootstrap_servers, topic):
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers)
    try:
        assert default_partition(producer, topic, b"key") is None  # no metadata yet: only send can tell
        producer.partitions_for(topic)
        keys = [f"user-{i}".encode() for i in range(200)]
        picked = [producer.send(topic, key=k, value=b"v") for k in keys]
        producer.flush()
        assert [default_partition(producer, topic, k) for k in keys] == [f.get(timeout=30).partition for f in picked]
        assert len({f.get().partition for f in picked}) == 3
    finally:
        producer.close()


class Skips:
    """A production exception handler that skips what it is asked about, and remembers it."""

    def __init__(self) -> None:
        self.asked: list[tuple[str | None, bytes, int]] = []

    def handle(self, context: ErrorHandlerContext, record, exception):
        self.asked.append((context.processor_node_id, record.key, len(record.value)))
        return HandlerResult.CONTINUE


def collector_on(bootstrap_servers: str, **configs) -> tuple[RecordCollector, StreamsProducer, Skips, list[str]]:
    producer = StreamsProducer(lambda **o: KafkaProducer(bootstrap_servers=bootstrap_servers, **SMALL_BATCHES,
                                                         **configs, **o),
                               client_id="batched-test", transactional_id=None)
    collector = RecordCollector(producer, task_id="0_0")
    handler, dropped = Skips(), []
    collector.bind_task(handler, exactly_once=False,
                        error_context=lambda node: ErrorHandlerContext("in", 0, 42, -1, (), node, "0_0"),
                        count_dropped=dropped.append)
    return collector, producer, handler, dropped


def test_batching_keeps_each_partitions_order_and_hands_a_too_large_sink_record_to_the_handler(
        bootstrap_servers, topic):
    collector, producer, handler, dropped = collector_on(bootstrap_servers, max_request_size=5_000)
    producer.partitions_for(topic)
    try:
        with collector.batching():
            for i in range(50):
                collector.send_bytes(topic, b"log%d" % i, b"v", 10 + i, partition=2)
                collector.send(topic, b"user-%d" % i, b"count", 100 + i, processor_node_id="sink")
                if i == 20:
                    collector.send(topic, b"user-20", b"x" * 6_000, 500, processor_node_id="sink")
            # only what came before the too-large record on its partition was sent: the rest waits
            assert sum(end_offsets(bootstrap_servers, topic).values()) <= 2 * 21
        collector.flush()
        offsets = collector.offsets()
    finally:
        producer.close()
    assert handler.asked == [("sink", b"user-20", 6_000)] and dropped == ["production"]
    out = written(bootstrap_servers, topic)
    assert [(k, t) for p, k, _, t in out if k.startswith(b"log")] == [(b"log%d" % i, 10 + i) for i in range(50)]
    for partition in range(3):
        users = [t for p, k, _, t in out if p == partition and k.startswith(b"user")]
        assert users == sorted(users)
    assert sorted(t for _, k, _, t in out if k.startswith(b"user")) == [100 + i for i in range(50)]
    on_2 = [k for p, k, _, _ in out if p == 2]
    assert offsets[(topic, 2)] == max(offset for offset, k in enumerate(on_2) if k.startswith(b"log"))


def test_a_changelog_record_too_large_after_batching_fails_naming_the_fix(bootstrap_servers, topic):
    collector, producer, _, _ = collector_on(bootstrap_servers, max_request_size=5_000)
    try:
        with pytest.raises(ProductionError, match="a changelog or dead-letter record cannot be skipped"):
            with collector.batching():
                collector.send_bytes(topic, b"small", b"v", 1, partition=0)
                collector.send_bytes(topic, b"big", b"x" * 6_000, 2, partition=0)
        collector.flush()
    finally:
        producer.close()
    assert written(bootstrap_servers, topic) == [(0, b"small", b"v", 1)]
