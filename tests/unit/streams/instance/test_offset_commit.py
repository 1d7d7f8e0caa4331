"""At-least-once, a stream thread's offset commit is bounded by the consumer's request timeout
and shows as the thread's Kafka wait while it runs (a group coordinator that does not answer
held the thread there with nothing in its status); a commit the coordinator could not answer
counts toward the task timeout and is tried again. No broker: the consumer records what the
thread shows during its commit."""

from __future__ import annotations

import types

from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import KafkaTimeoutError

from airflow_stateful_provider.streams.processing.records import OffsetAndMetadata
from airflow_stateful_provider.streams.topic_partition import TopicPartition

REQUEST_TIMEOUT_MS = 12_345


class CommittingConsumer:
    """Records each commit with the wait the thread showed meanwhile; raises ``error`` if set."""

    def __init__(self, thread, error: BaseException | None = None) -> None:
        self.config = {"request_timeout_ms": REQUEST_TIMEOUT_MS}
        self.commits: list[tuple[dict, int | None, tuple[str, str] | None]] = []
        self._thread, self._error = thread, error

    def commit(self, offsets, timeout_ms=None):
        current = self._thread.kafka_waits.current
        self.commits.append((offsets, timeout_ms, current and (current.call, current.waiting_for)))
        if self._error is not None:
            raise self._error


def with_a_task_to_commit(thread) -> types.SimpleNamespace:
    """The thread runs one task that processed up to offset 5 of partition in-0."""
    task = types.SimpleNamespace(commit_needed=True, commit_requested=False, post_commits=0)
    task.prepare_commit = lambda: {TopicPartition("in", 0): OffsetAndMetadata(5)}
    task.post_commit = lambda enforce_checkpoint: setattr(task, "post_commits", task.post_commits + 1)
    thread.task_manager.running_tasks = lambda: [task]
    thread.task_manager.snapshot_committed = lambda tasks: None
    return task


def test_the_commit_is_bounded_and_shown_as_the_threads_wait(thread):
    task = with_a_task_to_commit(thread)
    thread.consumer = consumer = CommittingConsumer(thread)
    assert thread.committer.commit() == 1
    ((offsets, timeout_ms, shown),) = consumer.commits
    assert [(tp, om.offset) for tp, om in offsets.items()] == [(KafkaTopicPartition("in", 0), 5)]
    assert timeout_ms == REQUEST_TIMEOUT_MS
    assert shown == ("commit", "the group coordinator")
    assert thread.kafka_waits.current is None  # the wait ends with the commit
    assert task.post_commits == 1


def test_a_commit_the_coordinator_did_not_answer_is_tried_again_within_the_task_timeout(thread):
    task = with_a_task_to_commit(thread)
    thread.consumer = consumer = CommittingConsumer(thread, KafkaTimeoutError("no answer"))
    assert thread.committer.commit() is None
    assert thread.kafka_waits.current is None
    assert thread.kafka_waits.failing_since_ms is not None  # counts toward task_timeout_ms
    assert task.post_commits == 0  # nothing committed: the task still needs its commit
    consumer._error = None
    assert thread.committer.commit() == 1
    assert len(consumer.commits) == 2 and task.post_commits == 1
    assert thread.kafka_waits.failing_since_ms is None
