"""The processing exception handler (KIP-1033), the production exception handler and the
timestamp extractors, on a task fed by hand: what each setting does to the output, the
metrics and the error raised."""

from __future__ import annotations

import pytest
from kafka.errors import InvalidProducerEpochError, MessageSizeTooLargeError, UnknownTopicOrPartitionError
from kafka.future import Future

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import (
    ConfigError,
    InvalidTimestampError,
    ProcessingError,
    ProductionError,
    TransactionFailedError,
)
from airflow_stateful_provider.streams.processing.error_handling import HEADER_OFFSET, HandlerResult
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.records import ConsumedRecord
from airflow_stateful_provider.streams.processing.task import StreamTask
from airflow_stateful_provider.streams.processor import Processor, PunctuationType
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition
from airflow_stateful_provider.streams.topology.topology import Topology

IN = TopicPartition("in", 0)


class Producer:
    """Records what is sent; refuses values larger than ``limit`` as kafka-python does, and
    hands out futures the test can fail."""

    def __init__(self, limit: int = 1_000):
        self.sent: list[tuple] = []
        self.futures: list[Future] = []
        self.limit = limit

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        if value is not None and len(value) > self.limit:
            raise MessageSizeTooLargeError(f"The message is {len(value)} bytes when serialized which is larger "
                                           f"than the maximum request size you have configured")
        self.sent.append((topic, key, value, timestamp_ms, headers))
        future = Future()
        self.futures.append(future)
        return future

    def flush(self, timeout=None):
        pass

    def partitions_for(self, topic):
        return {0}


class Fails(Processor):
    """Upper-cases the value; raises on the value "boom"."""

    def process(self, record):
        if record.value == "boom":
            raise ValueError("boom in user code")
        self.context.forward(record.with_value(record.value.upper()))


class Passes(Processor):
    def process(self, record):
        self.context.forward(record)


def config(**values) -> StreamsConfig:
    return StreamsConfig("app", "localhost:9092", default_key_serde="string", default_value_serde="string", **values)


def branching_task(producer: Producer, **values) -> StreamTask:
    """src -> fails -> out-a, and src -> passes -> out-b: a record failing in one branch still
    reaches the other under CONTINUE (Kafka Streams handles errors node by node)."""
    topology = (Topology().add_source("src", "in")
                .add_processor("fails", Fails, "src").add_sink("sink-a", "out-a", "fails")
                .add_processor("passes", Passes, "src").add_sink("sink-b", "out-b", "passes"))
    task = StreamTask(TaskId(0, 0), topology, config(**values), record_collector=RecordCollector(producer))
    task.initialize()
    task.complete_restoration()
    return task


def feed(task: StreamTask, *values: str, timestamps: list[int] | None = None) -> None:
    timestamps = timestamps or [10 + i for i in range(len(values))]
    task.add_records(IN, [ConsumedRecord("in", 0, i, ts, b"k", v.encode()) for i, (v, ts) in
                          enumerate(zip(values, timestamps, strict=True))])
    task.process_batch(0, 1_000)  # as the stream thread does: records, then due stream-time punctuations


def outputs(producer: Producer) -> list[tuple[str, bytes]]:
    return [(topic, value) for topic, _, value, _, _ in producer.sent]


# --------------------------------------------------------------------- processing


def test_processing_failure_fails_by_default_naming_record_and_processor():
    producer = Producer()
    task = branching_task(producer)
    with pytest.raises(ProcessingError, match=r"task 0_0, processor 'fails', topic 'in', partition 0, offset 1: "
                                              r"ValueError\('boom in user code'\)"):
        feed(task, "a", "boom", "c")
    assert outputs(producer) == [("out-a", b"A"), ("out-b", b"a")]
    assert task.committable_offsets()[IN].offset == 1  # the failed record is not consumed


def test_log_and_continue_skips_the_failed_branch_only_and_counts_it():
    producer = Producer()
    task = branching_task(producer, processing_exception_handler="log_and_continue")
    feed(task, "a", "boom", "c")
    assert outputs(producer) == [("out-a", b"A"), ("out-b", b"a"), ("out-b", b"boom"), ("out-a", b"C"),
                                 ("out-b", b"c")]
    assert task.metrics.dropped_records["processing"] == 1
    assert task.committable_offsets()[IN].offset == 3
    assert task.metrics.as_dict()["dropped-records-total"] == 1


def test_processing_dead_letter_gets_the_raw_input_record():
    producer = Producer()
    task = branching_task(producer, processing_exception_handler="dead_letter:app-dlq")
    feed(task, "boom")
    (dead,) = [s for s in producer.sent if s[0] == "app-dlq"]
    assert (dead[1], dead[2]) == (b"k", b"boom")
    headers = dict(dead[4])
    assert headers[HEADER_OFFSET] == b"0" and b"boom in user code" in headers["__streams.errors.message"]


def test_a_handler_object_sees_context_and_record_and_a_raising_handler_fails_the_task():
    calls = []

    class Handler:
        def handle(self, context, record, exception):
            calls.append((context.processor_node_id, context.offset, record.value, type(exception).__name__))
            return HandlerResult.CONTINUE

    task = branching_task(Producer(), processing_exception_handler=Handler())
    feed(task, "boom")
    assert calls == [("fails", 0, "boom", "ValueError")]

    class Broken:
        def handle(self, context, record, exception):
            raise RuntimeError("handler bug")

    task = branching_task(Producer(), processing_exception_handler=Broken())
    with pytest.raises(ProcessingError, match="processing exception handler .* failed .*handler bug"):
        feed(task, "boom")


def test_punctuator_failure_goes_to_the_handler_with_no_record():
    class Ticking(Processor):
        def init(self, context):
            context.schedule(5, PunctuationType.STREAM_TIME, self.tick)

        def tick(self, now):
            raise RuntimeError(f"tick at {now}")

        def process(self, record):
            pass

    topology = Topology().add_source("src", "in").add_processor("ticking", Ticking, "src")
    for handler, expected in (("log_and_fail", ProcessingError), ("log_and_continue", None)):
        task = StreamTask(TaskId(0, 0), topology, config(processing_exception_handler=handler),
                          record_collector=RecordCollector(Producer()))
        task.initialize()
        task.complete_restoration()
        if expected is None:
            feed(task, "a", "b", timestamps=[10, 20])
            assert task.metrics.dropped_records["punctuation"] == 2
        else:
            with pytest.raises(expected, match="punctuating processor 'ticking' in task 0_0 .*tick at 10"):
                feed(task, "a")


# --------------------------------------------------------------------- production


def test_a_record_too_large_fails_by_default_and_is_skipped_with_log_and_continue():
    producer = Producer(limit=3)
    task = branching_task(producer)
    with pytest.raises(ProductionError, match="'out-a'.*task 0_0 processor 'sink-a' topic=in partition=0 offset=1"
                                              ".*maximum request size.*FAIL"):
        feed(task, "a", "long")

    producer = Producer(limit=3)
    task = branching_task(producer, production_exception_handler="log_and_continue")
    feed(task, "a", "long", "c")
    assert outputs(producer) == [("out-a", b"A"), ("out-b", b"a"), ("out-a", b"C"), ("out-b", b"c")]
    assert task.metrics.dropped_records["production"] == 2  # both branches' copies


def test_a_serialization_failure_goes_to_the_production_handler():
    topology = Topology().add_source("src", "in").add_sink("sink", "out", "src", value_serde="int64")
    for handler in ("log_and_fail", "log_and_continue"):
        producer = Producer()
        task = StreamTask(TaskId(0, 0), topology, config(production_exception_handler=handler),
                          record_collector=RecordCollector(producer))
        task.initialize()
        task.complete_restoration()
        if handler == "log_and_fail":
            with pytest.raises(ProductionError, match="'out'.*int64"):
                feed(task, "not a number")
        else:
            feed(task, "not a number")
            assert producer.sent == [] and task.metrics.dropped_records["production"] == 1


def test_a_changelog_record_too_large_is_never_skipped():
    collector = RecordCollector(Producer(limit=3), task_id=TaskId(0, 0))
    with pytest.raises(ProductionError, match="7 bytes to 'app-s-changelog'.*cannot be skipped"):
        collector.send_bytes("app-s-changelog", b"k", b"123456", 1, partition=0)


def test_a_record_the_broker_refuses_goes_to_the_handler_at_least_once_but_fails_exactly_once():
    for exactly_once in (False, True):
        producer = Producer()
        collector = RecordCollector(producer, task_id=TaskId(0, 0))
        dropped = []
        from airflow_stateful_provider.streams.processing.error_handling import (
            LogAndContinueProductionExceptionHandler,
        )

        collector.bind_task(LogAndContinueProductionExceptionHandler(), exactly_once=exactly_once,
                            error_context=lambda node: _context(node), count_dropped=dropped.append)
        collector.send("out", b"k", b"v", 1, processor_node_id="sink")
        producer.futures[-1].failure(MessageSizeTooLargeError("broker: record too large"))
        if exactly_once:
            with pytest.raises(ProductionError, match="exactly_once_v2.*cannot be skipped.*max_request_size"):
                collector.flush()
        else:
            collector.flush()
            assert dropped == ["production"]


def test_missing_topics_and_fencing_never_reach_the_handler():
    producer = Producer()
    collector = RecordCollector(producer, task_id=TaskId(0, 0))
    calls = []

    class Handler:
        def handle(self, context, record, exception):
            calls.append(exception)
            return HandlerResult.CONTINUE

    collector.bind_task(Handler(), exactly_once=False, error_context=_context, count_dropped=lambda reason: None)
    collector.send("out", b"k", b"v", 1, processor_node_id="sink")
    producer.futures[-1].failure(UnknownTopicOrPartitionError())
    with pytest.raises(ProductionError, match="'out'.*UnknownTopicOrPartition"):
        collector.flush()
    collector.send("out", b"k", b"v", 1, processor_node_id="sink")
    producer.futures[-1].failure(InvalidProducerEpochError())
    with pytest.raises(TransactionFailedError):
        collector.flush()
    assert calls == []


def _context(node):
    from airflow_stateful_provider.streams.processing.error_handling import ErrorHandlerContext

    return ErrorHandlerContext("in", 0, 5, 1, (), node, TaskId(0, 0))


# --------------------------------------------------------------------- timestamps


def passthrough_task(producer: Producer, **values) -> StreamTask:
    topology = Topology().add_source("src", "in").add_sink("sink", "out", "src")
    task = StreamTask(TaskId(0, 0), topology, config(**values), record_collector=RecordCollector(producer))
    task.initialize()
    task.complete_restoration()
    return task


@pytest.mark.parametrize("bad", [-1, -5])
def test_invalid_timestamps_under_each_extractor(bad):
    producer = Producer()
    task = passthrough_task(producer)
    with pytest.raises(InvalidTimestampError, match=f"offset 1 has invalid timestamp {bad}.*"
                                                    f"log_and_skip_on_invalid_timestamp"):
        feed(task, "a", "b", "c", timestamps=[10, bad, 30])

    producer = Producer()
    task = passthrough_task(producer, default_timestamp_extractor="log_and_skip_on_invalid_timestamp")
    feed(task, "a", "b", "c", timestamps=[10, bad, 30])
    assert [(value, ts) for _, _, value, ts, _ in producer.sent] == [(b"a", 10), (b"c", 30)]
    assert task.metrics.dropped_records["invalid-timestamp"] == 1
    assert task.committable_offsets()[IN].offset == 3

    producer = Producer()
    task = passthrough_task(producer, default_timestamp_extractor="use_partition_time_on_invalid_timestamp")
    feed(task, "a", "b", "c", timestamps=[10, bad, 30])
    assert [(value, ts) for _, _, value, ts, _ in producer.sent] == [(b"a", 10), (b"b", 10), (b"c", 30)]
    task = passthrough_task(Producer(), default_timestamp_extractor="use_partition_time_on_invalid_timestamp")
    with pytest.raises(InvalidTimestampError, match="partition time is not known yet"):
        feed(task, "b", timestamps=[bad])


def test_a_user_extractor_gets_the_deserialized_record_and_partition_time():
    seen = []

    class FromValue:
        def extract(self, record, partition_time):
            seen.append((record.value, record.offset, partition_time))
            return int(record.value) if record.value.isdigit() else -1

    producer = Producer()
    task = passthrough_task(producer, default_timestamp_extractor=FromValue())
    feed(task, "100", "x", "300", timestamps=[1, 2, 3])
    assert seen == [("100", 0, -1), ("x", 1, 100), ("300", 2, 100)]
    assert [(value, ts) for _, _, value, ts, _ in producer.sent] == [(b"100", 100), (b"300", 300)]
    assert task.metrics.dropped_records["invalid-timestamp"] == 1


@pytest.mark.parametrize("field,value,match", [
    ("processing_exception_handler", "ignore", "processing_exception_handler must be one of"),
    ("processing_exception_handler", object(), "must have a handle"),
    ("production_exception_handler", "dead_letter:x", "production_exception_handler must be one of"),
    ("default_timestamp_extractor", "event_time", "default_timestamp_extractor must be one of"),
    ("default_timestamp_extractor", object(), "must have a extract"),
])
def test_bad_handler_settings_are_refused(field, value, match):
    with pytest.raises(ConfigError, match=match):
        config(**{field: value})
