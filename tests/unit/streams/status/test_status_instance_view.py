"""The runtime's objects are what status/instance_view.py says the collector reads.

The status package cannot import the runtime (tests/unit/test_layers.py), so nothing but
this test (and a type checker) ties the views to KafkaStreams, StreamThread, StreamTask,
StandbyTask and the ChangelogReader: a member renamed on one side fails here, not in a
status document published from production. No broker: the instance is not started; its
thread, tasks and reader are real objects, placed where a running thread keeps them.
"""

from __future__ import annotations

import uuid

import pytest

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreams
from airflow_stateful_provider.streams.instance.stream_thread import StreamThread
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.task import StreamTask, TaskState
from airflow_stateful_provider.streams.restoration.changelog_loss import LostChangelog
from airflow_stateful_provider.streams.restoration.changelog_reader import ChangelogReader, ChangelogState, TaskRole
from airflow_stateful_provider.streams.restoration.restore_source import CHANGELOG, RestoreSource
from airflow_stateful_provider.streams.restoration.standby_task import StandbyTask
from airflow_stateful_provider.streams.status import instance_view as views
from airflow_stateful_provider.streams.status.collector import status_document_from_instance
from airflow_stateful_provider.streams.status.document import InstanceStatus
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition
from airflow_stateful_provider.streams.topology.topology import Topology

CL = "app-counts-changelog"


class NoProducer:
    def send(self, *args, **kwargs):
        raise AssertionError("the status collector must not produce")

    def partitions_for(self, topic):
        return {0, 1}


class GroupConsumer:
    """The main consumer, as far as the collector reads it (kafka-python's group metadata)."""

    def group_metadata(self):
        from kafka import ConsumerGroupMetadata

        return ConsumerGroupMetadata("app", 5, "member-1", None)


@pytest.fixture
def instance(tmp_path):
    topology = Topology().add_source("src", "in").add_sink("sink", "out", "src")
    config = StreamsConfig("app", "localhost:9092", state_dir=str(tmp_path))
    streams = KafkaStreams(topology, config)
    thread = StreamThread(1, topology, config, client_id="c", consumer_factory=lambda **_: None,
                          producer_factory=lambda **_: None)
    thread.consumer = GroupConsumer()
    thread.changelog_reader = ChangelogReader(None)
    active = StreamTask(TaskId(0, 0), topology, config, record_collector=RecordCollector(NoProducer()))
    active.state = TaskState.RUNNING
    active.metrics.record_dropped("invalid-timestamp", 2)
    thread.task_manager.tasks[active.id] = active
    warmup = StandbyTask(TaskId(0, 1), stores=None, collector=None, warmup=True)
    thread.task_manager.standby_tasks[warmup.id] = warmup
    thread.changelog_reader.restore_sources[active.id] = RestoreSource(CHANGELOG, changelog_records=7)
    thread.changelog_reader.lost_tasks[TaskId(0, 2)] = (
        LostChangelog("0_2", "active", "counts", CL, 2, 49, 60, 80, str(tmp_path)),)
    thread.next_probing_rebalance_ms = 1_700_000_600_000
    streams.threads.append(thread)
    return streams


def test_the_runtime_objects_have_every_member_the_views_name(instance):
    thread = instance.threads[0]
    pairs = [
        (instance, views.PublishedInstanceView),
        (instance.config, views.PublishedConfigView),
        (thread, views.StreamThreadView),
        (thread.tasks[TaskId(0, 0)], views.ActiveTaskView),
        (thread.tasks[TaskId(0, 0)].metrics, views.TaskMetricsView),
        (thread.standby_tasks[TaskId(0, 1)], views.StandbyView),
        (thread.changelog_reader, views.ChangelogReaderView),
        (ChangelogState(TopicPartition(CL, 0), TaskId(0, 0), "counts", None, TaskRole.ACTIVE),
         views.ChangelogProgressView),
        (thread.changelog_reader.lost_tasks[TaskId(0, 2)][0], views.LostChangelogView),
        (thread.changelog_reader.restore_sources[TaskId(0, 0)], views.RestoreSourceView),
        (thread.consumer.group_metadata(), views.GroupMetadataView),
    ]
    assert [type(obj).__name__ for obj, view in pairs if not isinstance(obj, view)] == []


def test_a_document_is_built_from_the_runtime_objects_themselves(instance):
    doc = status_document_from_instance(instance, "i-1", 3, now_ms=1_700_000_000_000, host="h", pid=1)
    parsed = InstanceStatus.from_dict(doc, key="i-1")
    assert (parsed.state, parsed.generation, parsed.next_probing_rebalance_ms, parsed.processing_guarantee) == \
        ("CREATED", 5, 1_700_000_600_000, "at_least_once")
    assert uuid.UUID(parsed.process_id) == instance.process_id
    assert [(t.task_id, t.role, t.state) for t in parsed.tasks] == [
        ("0_2", "active", "state_lost"), ("0_0", "active", "running"), ("0_1", "warmup", "running")]
    running = parsed.tasks[1]
    assert running.dropped_records == {"invalid-timestamp": 2}
    assert running.restore is not None and running.restore.changelog_records == 7
