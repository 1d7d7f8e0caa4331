"""RecordCollector: changelog offsets from the last record sent per partition, send errors
surfacing on the next send or flush, whatever record failed."""

import pytest
from kafka.errors import InvalidProducerEpochError, ProducerFencedError
from kafka.future import Future

from airflow_stateful_provider.streams.errors import TransactionFailedError
from airflow_stateful_provider.streams.processing.record_collector import ProductionError, RecordCollector
from airflow_stateful_provider.streams.topic_partition import TopicPartition


class _Metadata:
    def __init__(self, topic, partition, offset):
        self.topic, self.partition, self.offset = topic, partition, offset


class PendingProducer:
    """Hands out kafka-python futures that complete only when the test says so."""

    def __init__(self):
        self.futures = []

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        future = Future()
        self.futures.append((topic, partition, headers, future))
        return future

    def flush(self, timeout=None):
        pass

    def partitions_for(self, topic):
        return {0, 1}


def test_offsets_come_from_the_last_acknowledged_record_of_each_explicit_partition():
    producer = PendingProducer()
    collector = RecordCollector(producer)
    collector.send_bytes("app-s-changelog", b"k", b"1", 10, partition=0)
    collector.send_bytes("app-s-changelog", b"k", b"2", 11, partition=0)
    collector.send_bytes("app-s-changelog", b"j", b"3", 12, partition=1)
    collector.send_bytes("out", b"k", b"2", 11)  # a sink record: the producer picks the partition
    (_, _, _, first), (_, _, _, second), (_, _, _, third), (_, _, _, sink) = producer.futures
    first.success(_Metadata("app-s-changelog", 0, 40))
    second.success(_Metadata("app-s-changelog", 0, 41))
    sink.success(_Metadata("out", 3, 7))
    # partition 1 not acknowledged yet: its offset appears once it is
    assert collector.offsets() == {TopicPartition("app-s-changelog", 0): 41}
    third.success(_Metadata("app-s-changelog", 1, 9))
    assert collector.offsets() == {TopicPartition("app-s-changelog", 0): 41, TopicPartition("app-s-changelog", 1): 9}
    # a later, lower acknowledgement never moves an offset back
    collector.send_bytes("app-s-changelog", b"k", b"4", 13, partition=0)
    producer.futures[-1][3].success(_Metadata("app-s-changelog", 0, 39))
    assert collector.offsets()[TopicPartition("app-s-changelog", 0)] == 41


def test_a_failed_earlier_record_fails_the_next_send_and_flush():
    producer = PendingProducer()
    collector = RecordCollector(producer, task_id="0_1")
    collector.send_bytes("app-s-changelog", b"k", b"1", 10, partition=0)
    collector.send_bytes("app-s-changelog", b"k", b"2", 11, partition=0)
    producer.futures[0][3].failure(RuntimeError("broker said no"))  # not the last record sent
    producer.futures[1][3].success(_Metadata("app-s-changelog", 0, 5))
    with pytest.raises(ProductionError, match="app-s-changelog.*0_1.*broker said no"):
        collector.send_bytes("out", b"k", b"2", 11)
    collector.send_bytes("out", b"k", b"3", 12)  # the error was reported once
    producer.futures[-1][3].failure(RuntimeError("sink down"))
    with pytest.raises(ProductionError, match="'out'.*sink down"):
        collector.flush()


def test_headers_go_to_the_producer_as_a_list_and_none_when_empty():
    producer = PendingProducer()
    collector = RecordCollector(producer)
    collector.send_bytes("out", b"k", b"v", 1, headers=(("h", b"1"),))
    collector.send_bytes("out", b"k", b"v", 1)
    assert [headers for _, _, headers, _ in producer.futures] == [[("h", b"1")], None]


@pytest.mark.parametrize("fencing", [InvalidProducerEpochError, ProducerFencedError])
def test_a_fenced_send_fails_the_transaction_instead_of_the_task(fencing):
    """The coordinator aborted the transaction (timed out) or another producer took over:
    the stream thread rolls its tasks back to the last commit (Kafka Streams: task
    migrated), where a ProductionError would stop the thread."""
    producer = PendingProducer()
    collector = RecordCollector(producer, task_id="0_2")
    collector.send_bytes("app-s-changelog", b"k", b"1", 10, partition=0)
    producer.futures[0][3].failure(fencing())
    with pytest.raises(TransactionFailedError, match="app-s-changelog.*0_2.*fenced") as raised:
        collector.send_bytes("out", b"k", b"2", 11)
    assert raised.value.migrated and not isinstance(raised.value, ProductionError)


class BatchingProducer(PendingProducer):
    """Also takes a partition's records at once (the runtime's StreamsProducer.send_batch),
    noting each call: a future for each tracked record, and the callable a failed batch of
    the others would call."""

    largest_batched_record = 100

    def __init__(self):
        super().__init__()
        self.calls = []
        self.tracked = []
        self.on_failure = []

    def send_batch(self, topic, partition, records, tracked, on_failure):
        self.calls.append((topic, partition, list(records)))
        self.tracked.append(list(tracked))
        self.on_failure.append(on_failure)
        futures = {}
        for i in tracked:
            futures[i] = Future()
            self.futures.append((topic, partition, None, futures[i]))
        return futures

    def default_partition(self, topic, key):
        return len(key) % 2


def test_batching_sends_each_partitions_records_in_one_call_in_order_when_the_block_ends():
    producer = BatchingProducer()
    collector = RecordCollector(producer)
    with collector.batching():
        collector.send_bytes("log", b"a", b"1", 1, partition=0)
        collector.send("out", b"kk", b"x", 2, processor_node_id="sink")  # default partition 0
        collector.send_bytes("log", b"b", b"2", 3, partition=0)
        collector.send_bytes("log", b"c", b"3", 4, partition=1)
        collector.send("out", b"k", b"y", 5, processor_node_id="sink", headers=[("h", b"v")])  # headers: at once
        with collector.batching():  # nested: one block
            collector.send_bytes("log", b"d", b"4", 6, partition=0)
        assert producer.calls == [] and len(producer.futures) == 1
    assert producer.calls == [("log", 0, [(b"a", b"1", 1), (b"b", b"2", 3), (b"d", b"4", 6)]),
                              ("out", 0, [(b"kk", b"x", 2)]), ("log", 1, [(b"c", b"3", 4)])]
    collector.send_bytes("log", b"e", b"5", 7, partition=0)  # outside the block: at once
    assert len(producer.calls) == 3


def test_only_sink_records_and_the_last_changelog_record_get_a_future_and_a_failed_batch_fails_the_next_flush():
    producer = BatchingProducer()
    collector = RecordCollector(producer, task_id="0_1")
    with collector.batching():
        for i in range(3):
            collector.send_bytes("log", b"k%d" % i, b"v", i, partition=0)
        collector.send("log", b"kk", b"x", 3, partition=0, processor_node_id="sink")
    assert producer.tracked == [[2, 3]]  # the last changelog record (its offset) and the sink record
    futures = [f for _, _, _, f in producer.futures]
    futures[1].failure(ValueError("sink record refused"))  # the handler's (fails: the default handler)
    with pytest.raises(ProductionError, match="sink record refused"):
        collector.flush()
    producer.on_failure[0](ValueError("batch lost"))  # a batch of the untracked changelog records
    with pytest.raises(ProductionError, match="0_1.*batch lost"):
        collector.flush()
    futures[0].success(_Metadata("log", 0, 41))
    assert collector.offsets() == {TopicPartition("log", 0): 41}


def test_an_error_inside_the_block_sends_what_waited_and_raises_the_error():
    producer = BatchingProducer()
    collector = RecordCollector(producer)
    with pytest.raises(RuntimeError, match="processing failed"):
        with collector.batching():
            collector.send_bytes("log", b"a", b"1", 1, partition=0)
            raise RuntimeError("processing failed")
    assert producer.calls == [("log", 0, [(b"a", b"1", 1)])]


def test_a_record_the_batch_refuses_is_sent_on_its_own_and_a_sink_record_too_large_to_wait_keeps_its_order():
    class Refusing(BatchingProducer):
        def send_batch(self, topic, partition, records, tracked, on_failure):
            raise ValueError("refused")

    producer = Refusing()
    collector = RecordCollector(producer)
    with collector.batching():
        collector.send_bytes("log", b"a", b"1", 1, partition=0)
        collector.send("out", b"kk", b"small", 2, processor_node_id="sink")
        collector.send("out", b"kk", b"x" * 200, 3, processor_node_id="sink")  # too large to wait
    # the partition's waiting record went first, each record on its own after the refusal
    assert [(t, p) for t, p, _, _ in producer.futures] == [("out", 0), ("out", 0), ("log", 0)]
