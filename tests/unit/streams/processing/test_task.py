"""StreamTask as the real runtime drives it: records per partition, timestamp order,
commit hooks, stream time restore, deserialization error handling, lifecycle."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import (
    DeserializationError,
    IllegalStateError,
    ProcessingError,
    StreamsError,
)
from airflow_stateful_provider.streams.processing.deserialization import DeserializationHandlerResult
from airflow_stateful_provider.streams.processing.error_handling import HEADER_OFFSET, HEADER_TOPIC
from airflow_stateful_provider.streams.processing.partition_group import PartitionGroup, RecordQueue
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.records import (
    ConsumedRecord,
    OffsetAndMetadata,
    decode_partition_time,
    encode_partition_time,
)
from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
from airflow_stateful_provider.streams.processing.task import StreamTask, TaskState
from airflow_stateful_provider.streams.processor import Processor, PunctuationType, Record
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition
from airflow_stateful_provider.streams.topology.store_builders import Stores
from airflow_stateful_provider.streams.topology.topology import Topology


class FakeProducer:
    def __init__(self):
        self.sent = []
        self.flushes = 0

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        self.sent.append((topic, partition, key, value, timestamp_ms, headers))

    def flush(self, timeout=None):
        self.flushes += 1

    def partitions_for(self, topic):
        return {0, 1}


class Recorder(Processor):
    def __init__(self, seen):
        self.seen = seen

    def process(self, record):
        meta = self.context.record_metadata
        self.seen.append((record.key, record.value, record.timestamp, meta.topic, meta.partition, meta.offset))
        self.context.forward(record)


def _config(**kw):
    return StreamsConfig("app", "localhost:9092", default_key_serde="string", default_value_serde="string", **kw)


def _task(seen, *, partition=1, config=None, now=lambda: 0):
    topology = (
        Topology()
        .add_source("src", "left", "right")
        .add_processor("rec", lambda: Recorder(seen), "src")
        .add_sink("sink", "out", "rec")
    )
    producer = FakeProducer()
    collector = RecordCollector(producer, task_id=TaskId(0, partition))
    task = StreamTask(TaskId(0, partition), topology, config or _config(), record_collector=collector, wall_clock=now)
    return task, producer


def _rec(topic, partition, offset, ts, key="k", value="v", headers=()):
    return ConsumedRecord(topic, partition, offset, ts, None if key is None else key.encode(),
                          None if value is None else value.encode(), headers)


def _run(task):
    task.initialize()
    task.complete_restoration()


def test_smallest_timestamp_first_across_partitions():
    seen = []
    task, producer = _task(seen)
    _run(task)
    assert task.partitions == [TopicPartition("left", 1), TopicPartition("right", 1)]
    task.add_records(TopicPartition("left", 1), [_rec("left", 1, 0, 5), _rec("left", 1, 1, 1), _rec("left", 1, 2, 9)])
    task.add_records(("right", 1), [_rec("right", 1, 10, 3), _rec("right", 1, 11, 7)])
    assert task.num_buffered() == 5
    order = []
    while task.process():
        order.append((seen[-1][3], seen[-1][5], task.stream_time))
    # head-of-queue comparison: left@5 vs right@3 -> right; left@5 vs right@7 -> left; then
    # left@1 (its head now) goes before right@7; stream time never goes back
    assert order == [("right", 10, 3), ("left", 0, 5), ("left", 1, 5), ("right", 11, 7), ("left", 2, 9)]
    assert task.stream_time == 9
    assert task.partition_time(("left", 1)) == 9
    assert [s[0] for s in producer.sent] == ["out"] * 5


def test_commit_hooks_offsets_and_partition_time_metadata():
    seen = []
    task, producer = _task(seen)
    _run(task)
    assert not task.commit_needed
    task.add_records(("left", 1), [_rec("left", 1, 41, 100), _rec("left", 1, 42, 50)])
    while task.process():
        pass
    assert task.commit_needed
    offsets = task.prepare_commit()
    assert producer.flushes == 1
    assert offsets == {TopicPartition("left", 1): OffsetAndMetadata(43, encode_partition_time(100))}
    task.post_commit()
    assert not task.commit_needed
    assert decode_partition_time(offsets[TopicPartition("left", 1)].metadata) == 100


def test_stream_time_restored_from_commit_metadata():
    seen = []
    task, _ = _task(seen)
    task.initialize()
    task.initialize_task_time({TopicPartition("left", 1): OffsetAndMetadata(10, encode_partition_time(500)),
                               TopicPartition("right", 1): "garbage"})
    task.complete_restoration()
    assert task.stream_time == 500
    assert decode_partition_time("garbage") == -1 and decode_partition_time("") == -1


def test_context_commit_requests_a_commit():
    class Committer(Processor):
        def process(self, record):
            self.context.commit()

    topology = Topology().add_source("src", "in").add_processor("c", Committer, "src")
    task = StreamTask(TaskId(0, 0), topology, _config(), record_collector=RecordCollector(FakeProducer()))
    _run(task)
    task.add_records(("in", 0), [_rec("in", 0, 0, 1)])
    task.process()
    assert task.commit_requested


def test_lifecycle_state_errors():
    seen = []
    task, _ = _task(seen)
    with pytest.raises(IllegalStateError, match="not RUNNING"):
        task.process()
    with pytest.raises(IllegalStateError, match="cannot complete restoration"):
        task.complete_restoration()
    _run(task)
    assert task.state is TaskState.RUNNING
    task.add_records(("left", 1), [_rec("left", 1, 0, 1)])
    task.suspend()
    assert task.state is TaskState.SUSPENDED and task.num_buffered() == 0
    task.resume()
    task.complete_restoration()
    task.close()
    assert task.state is TaskState.CLOSED
    with pytest.raises(IllegalStateError, match="closed"):
        task.add_records(("left", 1), [])


def test_unknown_partition_is_refused():
    seen = []
    task, _ = _task(seen)
    with pytest.raises(KeyError, match="not an input"):
        task.add_records(("elsewhere", 1), [])
    topology = Topology().add_source("src", "in")
    with pytest.raises(StreamsError, match="not read by subtopology"):
        StreamTask(TaskId(0, 0), topology, _config(), record_collector=RecordCollector(FakeProducer()),
                   partitions=[TopicPartition("other", 0)])


def test_processing_error_names_task_node_and_offset():
    class Boom(Processor):
        def process(self, record):
            raise ValueError("bad value")

    topology = Topology().add_source("src", "in").add_processor("boom", Boom, "src")
    task = StreamTask(TaskId(0, 2), topology, _config(), record_collector=RecordCollector(FakeProducer()),
                      partitions=[TopicPartition("in", 2)])
    _run(task)
    task.add_records(("in", 2), [_rec("in", 2, 77, 1)])
    with pytest.raises(ProcessingError, match=r"task 0_2, processor 'boom', topic 'in', partition 2, offset 77"):
        task.process()


def test_negative_timestamp_is_refused():
    seen = []
    task, _ = _task(seen)
    _run(task)
    with pytest.raises(StreamsError, match="invalid timestamp -1"):
        task.add_records(("left", 1), [_rec("left", 1, 5, -1)])


# --------------------------------------------------------------------- deserialization


def _int_task(handler, seen):
    topology = Topology().add_source("src", "in", value_serde=Serdes.int64()).add_processor(
        "rec", lambda: Recorder(seen), "src")
    producer = FakeProducer()
    task = StreamTask(TaskId(0, 0), topology, _config(deserialization_exception_handler=handler),
                      record_collector=RecordCollector(producer))
    _run(task)
    good = ConsumedRecord("in", 0, 0, 1, b"k", Serdes.int64().serialize(7))
    poison = ConsumedRecord("in", 0, 1, 2, b"k", b"\x01", (("h", b"x"),))
    return task, producer, good, poison


def test_log_and_fail_names_topic_partition_offset():
    seen = []
    task, _, good, poison = _int_task("log_and_fail", seen)
    task.add_records(("in", 0), [good])
    task.process()
    with pytest.raises(DeserializationError, match="topic 'in' partition 0 offset 1"):
        task.add_records(("in", 0), [poison])
    # state before the poison record is intact: its offset is committable
    assert task.committable_offsets()[TopicPartition("in", 0)].offset == 1


def test_log_and_continue_skips_and_counts():
    seen = []
    task, _, good, poison = _int_task("log_and_continue", seen)
    task.add_records(("in", 0), [poison, good])
    while task.process():
        pass
    assert [s[1] for s in seen] == [7]
    assert task.metrics.dropped_records["deserialization"] == 1


def test_dead_letter_topic_gets_raw_record_with_error_headers():
    seen = []
    task, producer, good, poison = _int_task("dead_letter:app-dlq", seen)
    task.add_records(("in", 0), [good, poison])
    while task.process():
        pass
    (dlq,) = [s for s in producer.sent if s[0] == "app-dlq"]
    topic, partition, key, value, ts, headers = dlq
    assert (key, value, ts) == (b"k", b"\x01", 2)
    headers = dict(headers)
    assert headers["h"] == b"x"
    assert headers[HEADER_TOPIC] == b"in" and headers[HEADER_OFFSET] == b"1"
    assert b"int64" in headers["__streams.errors.message"]
    assert task.metrics.dropped_records["deserialization"] == 1


def test_custom_handler_object():
    class Handler:
        def __init__(self):
            self.calls = []

        def handle(self, context, record, exception):
            self.calls.append((context.topic, context.offset, context.processor_node_id))
            return DeserializationHandlerResult.CONTINUE

    handler = Handler()
    seen = []
    task, _, good, poison = _int_task(handler, seen)
    task.add_records(("in", 0), [poison])
    assert handler.calls == [("in", 1, "src")]


# --------------------------------------------------------------------- partition group


def test_partition_group_idling_with_lag_provider():
    def deserialize(raw, partition_time):
        return Record(raw.key, raw.value, raw.timestamp)

    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    lags = {b: None}
    group = PartitionGroup(
        {a: RecordQueue(a, "s", deserialize), b: RecordQueue(b, "s", deserialize)},
        max_task_idle_ms=100,
        fetched_lag=lambda tp: lags[tp],
    )
    assert not group.ready_to_process(0)  # nothing buffered
    group.add_raw_records(a, [ConsumedRecord("a", 0, 0, 5, b"k", b"v")])
    assert not group.ready_to_process(0)  # b's lag unknown: wait for the fetch
    lags[b] = 3
    assert not group.ready_to_process(0)  # b has data on the broker: idle up to 100 ms
    assert not group.ready_to_process(99)
    assert group.ready_to_process(100)  # enforced processing
    lags[b] = 0
    assert group.ready_to_process(100)  # caught up: nothing to wait for
    group.add_raw_records(b, [ConsumedRecord("b", 0, 0, 1, b"k", b"v")])
    assert group.ready_to_process(0)
    record, _, queue = group.next_record()
    assert queue.partition == b and record.timestamp == 1
    disabled = PartitionGroup({a: RecordQueue(a, "s", deserialize), b: RecordQueue(b, "s", deserialize)},
                              max_task_idle_ms=-1, fetched_lag=lambda tp: None)
    disabled.add_raw_records(a, [ConsumedRecord("a", 0, 0, 5, b"k", b"v")])
    assert disabled.ready_to_process(0)


def test_task_with_persistent_store_checkpoints_changelog_offsets(tmp_path):
    class Counter(Processor):
        def init(self, context):
            super().init(context)
            self.store = context.get_state_store("counts")

        def process(self, record):
            self.store.put(record.key, (self.store.get(record.key) or 0) + 1)

    topology = (
        Topology()
        .add_source("src", "in")
        .add_processor("count", Counter, "src")
        .add_state_store(
            Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), Serdes.string(),
                                           Serdes.int64()),
            "count",
        )
    )
    config = _config(state_dir=str(tmp_path))

    class AckingProducer(FakeProducer):
        def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
            super().send(topic, value, key, headers, partition, timestamp_ms)
            offset = len(self.sent) - 1

            class Done:
                def add_callback(self, fn):
                    fn(type("M", (), {"topic": topic, "partition": partition, "offset": offset})())

                def add_errback(self, fn, *args):
                    pass

            return Done()

    producer = AckingProducer()
    collector = RecordCollector(producer, task_id=TaskId(0, 0))
    stores = TaskStateManager(TaskId(0, 0), topology, config, record_collector=collector)
    task = StreamTask(TaskId(0, 0), topology, config, record_collector=collector, stores=stores)
    _run(task)
    task.add_records(("in", 0), [_rec("in", 0, i, 10 + i) for i in range(3)])
    while task.process():
        pass
    changelog = TopicPartition("app-counts-changelog", 0)
    assert [(s[0], s[1], s[4]) for s in producer.sent] == [(changelog.topic, 0, ts) for ts in (10, 11, 12)]
    assert stores.changelog_partitions() == {"counts": changelog}
    task.prepare_commit()
    task.post_commit(enforce_checkpoint=True)
    checkpoint = tmp_path / "app" / "0_0" / ".checkpoint"
    assert checkpoint.read_text() == "0\n1\napp-counts-changelog 0 2\n"
    task.add_records(("in", 0), [_rec("in", 0, 3, 20)])
    task.process()
    task.post_commit()  # fewer than 10,000 offsets since the last write: no checkpoint
    assert checkpoint.read_text() == "0\n1\napp-counts-changelog 0 2\n"
    task.close()  # a clean close flushes and checkpoints
    assert checkpoint.read_text() == "0\n1\napp-counts-changelog 0 3\n"
    # a new task on the same directory sees the checkpoint and the data
    collector2 = RecordCollector(FakeProducer())
    stores2 = TaskStateManager(TaskId(0, 0), topology, config, record_collector=collector2)
    stores2.initialize()
    assert stores2.checkpointed_offsets() == {changelog: 3}
    assert stores2.get("counts").get("k") == 4
    stores2.close()


def test_emit_on_close_progress_survives_a_restart(tmp_path):
    """The last emitted window close time is committed with the offsets (as Kafka's
    processor metadata), so a restarted task does not emit closed sessions again."""
    from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
    from airflow_stateful_provider.streams.dsl.materialized import Materialized
    from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
    from airflow_stateful_provider.streams.windows import EmitStrategy, SessionWindowedSerde, SessionWindows

    S = Serdes.string()
    builder = StreamsBuilder()
    (builder.stream("in", Consumed.with_(S, S)).group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(10)).emit_strategy(EmitStrategy.on_window_close())
     .count(Materialized.as_("s").with_retention(1000)).to_stream()
     .to("out", Produced.with_(SessionWindowedSerde(S), Serdes.int64())))
    topology = builder.build()
    config = _config(state_dir=str(tmp_path), windowed_aggregation_emit_interval_ms=0)

    def start(committed=None):
        producer = FakeProducer()
        collector = RecordCollector(producer)
        stores = TaskStateManager(TaskId(0, 0), topology, config, record_collector=collector)
        task = StreamTask(TaskId(0, 0), topology, config, record_collector=collector, stores=stores)
        task.initialize()
        if committed:
            task.initialize_task_time(committed)
        task.complete_restoration()
        return task, producer

    def emitted(producer):
        return [s for s in producer.sent if s[0] == "out"]

    task, producer = start()
    task.add_records(("in", 0), [_rec("in", 0, 0, 0, key="a"), _rec("in", 0, 1, 50, key="b")])
    while task.process():
        pass
    assert len(emitted(producer)) == 1  # a's [0,0] closed at stream time 50
    committed = task.prepare_commit()
    task.post_commit(enforce_checkpoint=True)
    task.close()
    assert decode_partition_time(committed[TopicPartition("in", 0)].metadata) == 50

    task, producer = start(committed)
    assert task.processor_metadata == {"s": 40}
    task.add_records(("in", 0), [_rec("in", 0, 2, 51, key="c")])
    while task.process():
        pass
    assert emitted(producer) == []  # [0,0] is not emitted again
    task.add_records(("in", 0), [_rec("in", 0, 3, 70, key="c")])
    while task.process():
        pass
    # close = 60: b's [50,50] and c's [51,51] are emitted, each once
    assert [s[2][:1] for s in emitted(producer)] == [b"b", b"c"]
    task.close()


def test_restore_from_the_changelog_reproduces_the_stores(tmp_path):
    """What a task wrote to its changelogs, replayed through TaskStateManager.restore into
    a fresh task's stores, gives the same stores (the runtime's restoration entry point)."""
    from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
    from airflow_stateful_provider.streams.dsl.materialized import Materialized
    from airflow_stateful_provider.streams.dsl.parameters import Consumed
    from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
    from airflow_stateful_provider.streams.testing import TopologyTestDriver
    from airflow_stateful_provider.streams.windows import SessionWindows

    S = Serdes.string()
    builder = StreamsBuilder()
    builder.stream("clicks", Consumed.with_(S, S)).group_by_key().windowed_by(
        SessionWindows.of_inactivity_gap_with_no_grace(10)).count(Materialized.as_("sessions").with_retention(1000))
    builder.table("rates", Consumed.with_(S, S), Materialized.as_versioned("rates", 500))
    topology = builder.build()
    with TopologyTestDriver(topology, {"application_id": "app"}) as driver:
        clicks = driver.create_input_topic("clicks", S, S)
        rates = driver.create_input_topic("rates", S, S)
        for i, (key, ts) in enumerate([("a", 0), ("b", 3), ("a", 5), ("a", 30), ("b", 9), ("a", 18)]):
            clicks.pipe_input(key, "x", ts)
            rates.pipe_input(key, f"r{i}", ts * 10)
        expected_sessions = {k: driver.get_session_store("sessions").fetch(k) for k in "ab"}
        expected_rates = {k: driver.get_versioned_key_value_store("rates").get_versions(k) for k in "ab"}
        changelogs = {}
        for store in ("sessions", "rates"):
            out = driver.create_output_topic(f"app-{store}-changelog", "bytes", "bytes")
            changelogs[store] = [ChangelogRecord(r.key, r.value, r.timestamp, offset)
                                 for offset, r in enumerate(out.read_records_to_list())]

    config = _config(state_dir=str(tmp_path))
    for store_type in ("in_memory", "rocksdb"):
        restored = {}
        for sub in topology.subtopologies():  # sessions and rates live in different subtopologies
            manager = TaskStateManager(TaskId(sub.id, 0), topology, config,
                                       record_collector=RecordCollector(FakeProducer()), store_type=store_type)
            manager.initialize()
            ((store, partition),) = manager.changelog_partitions().items()
            assert partition == TopicPartition(f"app-{store}-changelog", 0)
            assert manager.restore(partition, changelogs[store]) == len(changelogs[store])
            if store == "sessions":
                restored[store] = {k: manager.get(store).fetch(k) for k in "ab"}
            else:
                restored[store] = {k: manager.get(store).get_versions(k) for k in "ab"}
            manager.close()
        assert restored == {"sessions": expected_sessions, "rates": expected_rates}


def test_process_batch_is_the_per_record_loop_in_one_call():
    """process_batch processes in the same order as process() one by one, fires the same
    stream-time punctuations between records, stops at its limit and while a partition is
    empty and may still get data (max_task_idle_ms), and counts what it processed."""

    def build():
        seen, fired = [], []

        class Punctuating(Recorder):
            def init(self, context):
                super().init(context)
                context.schedule(4, PunctuationType.STREAM_TIME, lambda t: fired.append((t, len(seen))))

        topology = (Topology().add_source("src", "left", "right")
                    .add_processor("rec", lambda: Punctuating(seen), "src").add_sink("sink", "out", "rec"))
        lags = {TopicPartition("left", 1): 0, TopicPartition("right", 1): 0}
        task = StreamTask(TaskId(0, 1), topology, _config(max_task_idle_ms=60_000), wall_clock=lambda: 0,
                          record_collector=RecordCollector(FakeProducer()), fetched_lag=lags.get)
        _run(task)
        task.add_records(("left", 1), [_rec("left", 1, o, ts) for o, ts in enumerate((5, 1, 9, 10, 17))])
        task.add_records(("right", 1), [_rec("right", 1, 10, 3), _rec("right", 1, 11, 7)])
        return task, seen, fired, lags

    one_by_one, seen_1, fired_1, _ = build()
    while one_by_one.is_processable(0) and one_by_one.process(0):
        one_by_one.maybe_punctuate_stream_time()
    task, seen, fired, lags = build()
    assert task.process_batch(0, 2) == 2  # the limit
    assert [(s[3], s[5]) for s in seen] == [("right", 10), ("left", 0)]
    lags[TopicPartition("right", 1)] = 5  # right's next records are on their way:
    assert task.process_batch(0, 100) == 2  # the batch stops once right is empty
    assert [(s[3], s[5]) for s in seen] == [(s[3], s[5]) for s in seen_1[:4]]
    assert task.process_batch(0, 100) == 0
    lags[TopicPartition("right", 1)] = 0
    assert task.process_batch(0, 100) == 3
    assert seen == seen_1 and len(seen) == 7
    assert fired == fired_1 and len(fired) >= 3
    assert task.metrics.process_total == one_by_one.metrics.process_total == 7
    assert task.process_batch(0, 100) == 0


def test_process_batch_stops_at_its_deadline():
    """A slow processor cannot hold the stream thread past the commit (and, exactly-once, the
    transaction timeout): the batch ends at the deadline, looked at every 32 records."""
    import time as time_module

    class Slow(Processor):
        def process(self, record):
            time_module.sleep(0.002)

    topology = Topology().add_source("src", "in").add_processor("slow", Slow, "src")
    task = StreamTask(TaskId(0, 0), topology, _config(), record_collector=RecordCollector(FakeProducer()))
    _run(task)
    task.add_records(("in", 0), [_rec("in", 0, i, i) for i in range(500)])
    started = time_module.monotonic()
    done = task.process_batch(0, 1_000, deadline=started + 0.05)
    assert done == 32, done  # 32 records take at least 64 ms: the first check is past the deadline
    assert task.process_batch(0, 1_000) == 500 - done  # without a deadline: the rest


def test_the_processed_position_is_the_next_offset_after_what_the_stores_reflect():
    """Interactive queries' position: past the last processed record; before any, the
    committed offset the task started from; a partition with neither is not known."""
    seen = []
    task, _ = _task(seen)
    task.initialize()
    task.initialize_task_time({TopicPartition("left", 1): OffsetAndMetadata(10, encode_partition_time(500)),
                               TopicPartition("right", 1): None})
    task.complete_restoration()
    assert task.processed_position() == {TopicPartition("left", 1): 10}
    task.add_records(TopicPartition("left", 1), [_rec("left", 1, 10, 600), _rec("left", 1, 11, 700)])
    task.add_records(TopicPartition("right", 1), [_rec("right", 1, 4, 650)])
    assert task.process()  # left@10 only: buffered records are not reflected yet
    assert task.processed_position() == {TopicPartition("left", 1): 11}
    while task.process():
        pass
    assert task.processed_position() == {TopicPartition("left", 1): 12, TopicPartition("right", 1): 5}
