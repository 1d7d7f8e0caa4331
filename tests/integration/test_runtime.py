"""The Kafka-backed instance on a real broker, in this process: restoration (docs/semantics.md §2),
poison records under each deserialization handler, repartition purging and the status topic (a
lost changelog: test_state_identity.py)."""

from __future__ import annotations

import io
import json
import os
import socket
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from airflow_stateful_provider.cli import main as cli_main
from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreams, KafkaStreamsState
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
from airflow_stateful_provider.streams.restoration.changelog_reader import ChangelogReader
from airflow_stateful_provider.streams.restoration.restore_consumer import RESTORE_FETCH_BYTES
from airflow_stateful_provider.streams.state.common.checkpoint import OffsetCheckpoint
from airflow_stateful_provider.streams.task_id import TaskId
from tests.integration.topologies import json_counts, regrouped_counts
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, produce, read_all
from tools.waits import wait_until

pytestmark = pytest.mark.kafka


class RecordingListener:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_restore_start(self, partition, store_name, start_offset, end_offset):
        self.events.append(("start", store_name, start_offset, end_offset))

    def on_batch_restored(self, partition, store_name, batch_end_offset, num_restored):
        self.events.append(("batch", store_name, batch_end_offset, num_restored))

    def on_restore_end(self, partition, store_name, total_restored):
        self.events.append(("end", store_name, total_restored))

    def on_restore_suspended(self, partition, store_name, total_restored):
        self.events.append(("suspended", store_name, total_restored))

    def total(self, kind: str) -> int:
        return sum(e[-1] for e in self.events if e[0] == kind)  # records restored


@pytest.fixture(params=["at_least_once", "exactly_once_v2"])
def names(request):
    """Topic and application names of one test, and the processing guarantee it runs under:
    every runtime test runs under both."""
    suffix = uuid.uuid4().hex[:8]
    return {"app": f"app-{suffix}", "input": f"in-{suffix}", "output": f"out-{suffix}", "dlq": f"dlq-{suffix}",
            "guarantee": request.param}


def config(bootstrap_servers: str, names: dict, state_dir: Path, **overrides) -> StreamsConfig:
    return StreamsConfig(application_id=names["app"], bootstrap_servers=bootstrap_servers, state_dir=str(state_dir),
                         commit_interval_ms=200, consumer_configs={"session_timeout_ms": 10_000},
                         processing_guarantee=names["guarantee"], **overrides)


def final_counts(bootstrap_servers: str, topic: str) -> dict[str, int]:
    latest = {}
    for record in read_all(bootstrap_servers, topic):
        latest[record.key.decode()] = int.from_bytes(record.value, "big", signed=True)
    return latest


def run_until(streams: KafkaStreams, condition, what: str, timeout: float = 60) -> None:
    streams.start()
    try:
        wait_until(lambda: condition() or streams.state in (KafkaStreamsState.ERROR, KafkaStreamsState.PENDING_ERROR),
                   timeout, what, lambda: f"state {streams.state}, metrics {streams.metrics()}")
    except BaseException:
        streams.close(timeout=30)
        raise


def semantics_2_changelog(bootstrap_servers: str, names: dict, tmp_path: Path):
    """The docs/semantics.md §2 example: a changelog with records at 0-9 (offset 8 has a null key)
    and a checkpoint at 5, plus an opened state manager and a restore consumer."""
    cfg = config(bootstrap_servers, names, tmp_path)
    changelog = f"{names['app']}-counts-changelog"
    create_topics(bootstrap_servers, {changelog: 1})
    value = (1).to_bytes(8, "big")
    records = [(f"k{i}".encode(), value) for i in range(10)]
    records[8] = (None, value)
    produce(bootstrap_servers, changelog, records)
    task_id = TaskId(0, 0)
    os.makedirs(cfg.task_state_dir(task_id))
    OffsetCheckpoint.in_task_dir(cfg.task_state_dir(task_id)).write({(changelog, 0): 5})
    manager = TaskStateManager(task_id, json_counts(names["input"], names["output"]), cfg,
                               record_collector=RecordCollector(producer=None, task_id=task_id))
    manager.initialize()
    restore_consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                                     auto_offset_reset="none")
    return cfg, task_id, changelog, value, manager, restore_consumer


def test_restoration_applies_up_to_the_captured_end_offset_and_skips_null_keys(bootstrap_servers, names, tmp_path):
    """docs/semantics.md §2: checkpoint 5, end offset 10, records at 6, 7, 8 (null key), 9, then 10
    and 11 appended -> the active restores 6, 7 and 9 and leaves 10 and 11 alone."""
    cfg, task_id, changelog, value, manager, restore_consumer = semantics_2_changelog(bootstrap_servers, names,
                                                                                      tmp_path)
    listener = RecordingListener()
    reader = ChangelogReader(restore_consumer, listener)
    try:
        assert reader.register(task_id, manager) is False
        produce(bootstrap_servers, changelog, [(b"k10", value), (b"k11", value)])  # past the captured end
        completed = []
        wait_until(lambda: completed.extend(reader.restore()) or completed == [task_id], 30, "restoration to complete")
        store = manager.get("counts")
        assert {k for k in [f"k{i}" for i in range(12)] if store.get(k) is not None} == {"k6", "k7", "k9"}
        assert listener.events[0] == ("start", "counts", 6, 10)
        assert listener.total("batch") == 3 and listener.events[-1] == ("end", "counts", 3)
        assert OffsetCheckpoint.in_task_dir(cfg.task_state_dir(task_id)).read() == {(changelog, 0): 9}
    finally:
        manager.close()
        restore_consumer.close()


class RecordingStandbyListener:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_update_start(self, partition, store_name, start_offset):
        self.events.append(("start", start_offset))

    def on_batch_loaded(self, partition, store_name, task_id, batch_end_offset, batch_size, current_end_offset):
        self.events.append(("batch", batch_end_offset, batch_size, current_end_offset))

    def on_update_suspended(self, partition, store_name, store_offset, current_end_offset, reason):
        self.events.append(("suspended", store_offset, current_end_offset, reason.value))


def test_standby_applies_past_the_end_offset_and_a_promotion_restores_only_the_remainder(
        bootstrap_servers, names, tmp_path):
    """docs/semantics.md §2: a standby applies 6, 7, 9, 10 and 11 and keeps going; promoted, it keeps
    its store and restores only what arrived since."""
    cfg, task_id, changelog, value, manager, restore_consumer = semantics_2_changelog(bootstrap_servers, names,
                                                                                      tmp_path)
    standby_events, restore_events = RecordingStandbyListener(), RecordingListener()
    reader = ChangelogReader(restore_consumer, restore_events, standby_events)
    try:
        reader.register_standby(task_id, manager)
        produce(bootstrap_servers, changelog, [(b"k10", value), (b"k11", value)])
        store = manager.get("counts")
        wait_until(lambda: reader.restore() == [] and store.get("k11") is not None, 30, "the standby to apply k11")
        assert {f"k{i}" for i in range(12) if store.get(f"k{i}") is not None} == {"k6", "k7", "k9", "k10", "k11"}
        assert standby_events.events[0] == ("start", 6)
        assert sum(e[2] for e in standby_events.events if e[0] == "batch") == 5
        assert reader.standby_tasks == {task_id} and reader.restoring_tasks == set()

        produce(bootstrap_servers, changelog, [(b"k12", value), (b"k13", value)])  # arrives while standing by
        assert reader.promote(task_id) is False
        assert standby_events.events[-1][0] == "suspended" and standby_events.events[-1][-1] == "promoted"
        completed = []
        wait_until(lambda: completed.extend(reader.restore()) or completed == [task_id], 30, "the promoted task")
        assert store.get("k13") is not None
        assert restore_events.events[-1] == ("end", "counts", 2)  # only the remainder was restored
        assert OffsetCheckpoint.in_task_dir(cfg.task_state_dir(task_id)).read() == {(changelog, 0): 13}
    finally:
        manager.close()
        restore_consumer.close()


def test_restart_with_fresh_state_dir_restores_the_whole_changelog(bootstrap_servers, names, tmp_path):
    create_topics(bootstrap_servers, {names["input"]: 2, names["output"]: 2})
    produce(bootstrap_servers, names["input"], [(f"user-{i % 7}".encode(), b"{}") for i in range(700)])
    first = KafkaStreams(json_counts(names["input"], names["output"]), config(bootstrap_servers, names, tmp_path / "a"))
    run_until(first, lambda: sum(committed_offsets(bootstrap_servers, names["app"], names["input"]).values()) == 700,
              "700 records committed")
    # The first member of a new group joins once: it loads the topic metadata after
    # subscribing, so its own assignment is not outdated at once (that took a second
    # rebalance on every start).
    generation = first.threads[0].consumer._coordinator._generation.generation_id
    # restoration fetches 4 MiB per partition (kafka-python's default, 1 MiB, for processing)
    fetch_bytes = [c.config["max_partition_fetch_bytes"] for c in (first.threads[0].restore_consumer,
                                                                   first.threads[0].consumer)]
    assert fetch_bytes == [RESTORE_FETCH_BYTES, 1 << 20] and RESTORE_FETCH_BYTES == 4 << 20
    first.close(timeout=30)
    assert first.state is KafkaStreamsState.NOT_RUNNING
    assert generation == 1

    listener = RecordingListener()
    # a consumer_configs value is the restore consumer's too: this restore fetches 64 KiB at a time
    second = KafkaStreams(json_counts(names["input"], names["output"]),
                          config(bootstrap_servers, names, tmp_path / "b").with_overrides(
                              consumer_configs={"session_timeout_ms": 10_000, "max_partition_fetch_bytes": 1 << 16}))
    second.set_global_state_restore_listener(listener)
    produce(bootstrap_servers, names["input"], [(f"user-{i % 7}".encode(), b"{}") for i in range(70)])
    run_until(second, lambda: sum(committed_offsets(bootstrap_servers, names["app"], names["input"]).values()) == 770,
              "770 records committed")
    assert second.threads[0].restore_consumer.config["max_partition_fetch_bytes"] == 1 << 16
    second.close(timeout=30)
    assert listener.total("end") == 700, listener.events  # one changelog record per processed input record
    assert final_counts(bootstrap_servers, names["output"]) == {f"user-{i}": 110 for i in range(7)}


def poison_input(bootstrap_servers: str, names: dict) -> list[int]:
    """30 good JSON records on one partition with 3 undecodable ones; returns the poison offsets."""
    create_topics(bootstrap_servers, {names["input"]: 1, names["output"]: 1})
    records, poison = [], []
    for i in range(33):
        if i in (5, 17, 29):
            records.append((b"k", b"{not json"))
            poison.append(i)
        else:
            records.append((b"k", json.dumps({"n": i}).encode()))
    produce(bootstrap_servers, names["input"], records)
    return poison


def test_poison_records_log_and_continue_skips_and_counts(bootstrap_servers, names, tmp_path):
    poison_input(bootstrap_servers, names)
    streams = KafkaStreams(json_counts(names["input"], names["output"]),
                           config(bootstrap_servers, names, tmp_path,
                                  deserialization_exception_handler="log_and_continue"))
    run_until(streams, lambda: committed_offsets(bootstrap_servers, names["app"], names["input"]) == {0: 33},
              "all 33 records committed")
    metrics = streams.metrics()["0_0"]
    streams.close(timeout=30)
    assert metrics["dropped-records-total:deserialization"] == 3
    assert final_counts(bootstrap_servers, names["output"]) == {"k": 30}


def test_poison_records_go_to_the_dead_letter_topic_with_the_error(bootstrap_servers, names, tmp_path):
    poison = poison_input(bootstrap_servers, names)
    streams = KafkaStreams(json_counts(names["input"], names["output"]),
                           config(bootstrap_servers, names, tmp_path,
                                  deserialization_exception_handler=f"dead_letter:{names['dlq']}"))
    run_until(streams, lambda: committed_offsets(bootstrap_servers, names["app"], names["input"]) == {0: 33},
              "all 33 records committed")
    streams.close(timeout=30)
    dead = read_all(bootstrap_servers, names["dlq"])
    assert [r.value for r in dead] == [b"{not json"] * 3
    for record, offset in zip(dead, poison, strict=True):
        headers = dict(record.headers)
        assert headers["__streams.errors.topic"] == names["input"].encode()
        assert headers["__streams.errors.offset"] == str(offset).encode()
        assert (b"JSON" in headers["__streams.errors.exception"]
                or b"json" in headers["__streams.errors.message"].lower())
    assert final_counts(bootstrap_servers, names["output"]) == {"k": 30}


def test_poison_record_log_and_fail_stops_in_error_with_committed_state_intact(bootstrap_servers, names, tmp_path):
    poison_input(bootstrap_servers, names)
    errors = []
    streams = KafkaStreams(json_counts(names["input"], names["output"]), config(bootstrap_servers, names, tmp_path))
    streams.set_uncaught_exception_handler(errors.append)
    streams.start()
    assert streams.wait_for_state(KafkaStreamsState.ERROR, timeout=60) is KafkaStreamsState.ERROR
    assert len(errors) == 1
    message = str(errors[0])
    assert f"topic {names['input']!r}" in message and "partition 0" in message and "offset 5" in message
    committed = committed_offsets(bootstrap_servers, names["app"], names["input"]).get(0, 0)
    assert committed <= 5, "an offset past the poison record was committed"

    # Committed state is intact: continuing past the poison records counts every good record;
    # the only excess is the at-least-once replay of good records after the last commit.
    resumed = KafkaStreams(json_counts(names["input"], names["output"]),
                           config(bootstrap_servers, names, tmp_path,
                                  deserialization_exception_handler="log_and_continue"))
    run_until(resumed, lambda: committed_offsets(bootstrap_servers, names["app"], names["input"]) == {0: 33},
              "all 33 records committed after the restart")
    resumed.close(timeout=30)
    final = final_counts(bootstrap_servers, names["output"])["k"]
    assert 30 <= final <= 30 + (5 - committed)


def test_repartition_topic_is_purged_below_committed_offsets(bootstrap_servers, names, tmp_path):
    create_topics(bootstrap_servers, {names["input"]: 2, names["output"]: 2})
    words = ["apple", "avocado", "banana", "blueberry", "cherry"] * 40
    produce(bootstrap_servers, names["input"], [(str(i).encode(), w.encode()) for i, w in enumerate(words)])
    streams = KafkaStreams(regrouped_counts(names["input"], names["output"]).build(),
                           config(bootstrap_servers, names, tmp_path, repartition_purge_interval_ms=200))
    run_until(streams, lambda: sum(committed_offsets(bootstrap_servers, names["app"], names["input"]).values()) == 200,
              "every input record committed")
    repartition = next(t.name for t in streams.internal_topics if t.kind == "repartition")
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers)
    tps = [TopicPartition(repartition, p) for p in range(2)]
    try:
        # 200 records; under exactly-once the transaction markers take offsets too
        ends = {p: end for p, end in end_offsets(bootstrap_servers, repartition).items() if end > 0}
        assert sum(ends.values()) >= 200
        wait_until(lambda: committed_offsets(bootstrap_servers, names["app"], repartition) == ends,
                   30, "every repartitioned record committed",
                   lambda: f"committed {committed_offsets(bootstrap_servers, names['app'], repartition)}, end {ends}")
        wait_until(lambda: sum(consumer.beginning_offsets(tps).values()) == sum(ends.values()), 30,
                   "the repartition topic to be purged", lambda: f"beginning offsets {consumer.beginning_offsets(tps)}")
    finally:
        consumer.close()
        streams.close(timeout=30)
    assert final_counts(bootstrap_servers, names["output"]) == {"a": 80, "b": 80, "c": 40}


def test_running_instance_is_visible_in_the_status_topic_until_it_stops(bootstrap_servers, names, tmp_path):
    from airflow_stateful_provider.streams.errors import UnknownApplicationError
    from airflow_stateful_provider.streams.status.reader import fetch_application_status
    from airflow_stateful_provider.streams.status.rendering import render_status_table

    create_topics(bootstrap_servers, {names["input"]: 2, names["output"]: 2})
    produce(bootstrap_servers, names["input"], [(b"k%d" % i, b"{}") for i in range(20)])
    streams = KafkaStreams(json_counts(names["input"], names["output"]),
                           config(bootstrap_servers, names, tmp_path, instance_id="instance-0", instance_epoch=3,
                                  status_interval_ms=200))
    run_until(streams, lambda: streams.state is KafkaStreamsState.RUNNING, "the instance to run")
    try:
        def both_tasks_running() -> bool:
            status = fetch_application_status(bootstrap_servers, names["app"])
            return [(t.task_id, t.state, t.active and t.active.instance_id) for t in status.tasks] == \
                [("0_0", "running", "instance-0"), ("0_1", "running", "instance-0")]
        wait_until(both_tasks_running, 30, "both tasks reported running by instance-0")
        status = fetch_application_status(bootstrap_servers, names["app"])
        (instance,) = status.instances
        assert (instance.instance_id, instance.epoch, instance.state, instance.stale) == \
            ("instance-0", 3, "RUNNING", False)
        table = render_status_table(status)
        assert "0_0" in table and "instance-0" in table
        # The on-call command shows the same.
        out = io.StringIO()
        assert cli_main(["status", names["app"], "--bootstrap-servers", bootstrap_servers], out=out) == 0
        assert "0_0" in out.getvalue() and "instance-0" in out.getvalue()
        out = io.StringIO()
        assert cli_main(["status", names["app"], "--bootstrap-servers", bootstrap_servers, "--json"], out=out) == 0
        assert {t["task_id"] for t in json.loads(out.getvalue())["tasks"]} == {"0_0", "0_1"}
    finally:
        streams.close(timeout=30)
    with pytest.raises(UnknownApplicationError):
        fetch_application_status(bootstrap_servers, names["app"])  # the tombstone removed the only instance
    assert cli_main(["status", names["app"], "--bootstrap-servers", bootstrap_servers], out=io.StringIO()) == 1
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        unused = f"127.0.0.1:{probe.getsockname()[1]}"
    assert cli_main(["status", names["app"], "--bootstrap-servers", unused], out=io.StringIO()) == 3  # unreachable


def test_static_member_restarting_within_the_session_timeout_keeps_its_tasks_without_a_rebalance(
        bootstrap_servers, names, tmp_path):
    create_topics(bootstrap_servers, {names["input"]: 2, names["output"]: 2})
    produce(bootstrap_servers, names["input"], [(b"k%d" % i, b"{}") for i in range(20)])
    cfg = config(bootstrap_servers, names, tmp_path, group_instance_id="node-a")

    def generation_and_tasks(streams: KafkaStreams) -> tuple[int, list[str]]:
        thread = streams.threads[0]
        return thread.consumer.group_metadata().generation_id, sorted(str(t) for t in thread.tasks)

    first = KafkaStreams(json_counts(names["input"], names["output"]), cfg)
    run_until(first, lambda: first.state is KafkaStreamsState.RUNNING and len(first.threads[0].tasks) == 2,
              "the first run to own both tasks")
    before = generation_and_tasks(first)
    first.close(timeout=30)  # a static member does not leave the group on close

    second = KafkaStreams(json_counts(names["input"], names["output"]), cfg)
    run_until(second, lambda: second.state is KafkaStreamsState.RUNNING and len(second.threads[0].tasks) == 2,
              "the restarted instance to own both tasks")
    try:
        assert generation_and_tasks(second) == before  # same generation: the group did not rebalance
    finally:
        second.close(timeout=30)
