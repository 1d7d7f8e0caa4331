"""The task manager's paused input partitions against the consumer's: kafka-python keeps a
partition's pause across an assignment that keeps the partition, so a partition paused while
it has no task (its tasks dropped outside the group) must be resumed by the next task that
runs it, or it is never fetched again. No broker: a consumer that keeps assignment and pauses."""

from __future__ import annotations

from kafka import TopicPartition as KafkaTopicPartition

from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition


class PausingConsumer:
    """What the task manager asks of the consumer about pauses, as kafka-python keeps them."""

    def __init__(self, assigned: set[KafkaTopicPartition]) -> None:
        self.assigned = set(assigned)
        self.paused_partitions: set[KafkaTopicPartition] = set()

    def assignment(self) -> set[KafkaTopicPartition]:
        return set(self.assigned)

    def pause(self, *partitions: KafkaTopicPartition) -> None:
        self.paused_partitions.update(partitions)

    def resume(self, *partitions: KafkaTopicPartition) -> None:
        self.paused_partitions.difference_update(partitions)


class RestoredTask:
    """A task whose restoration just completed, with nothing buffered."""

    def __init__(self, partitions: list[TopicPartition]) -> None:
        self.partitions = partitions
        self.completed = False

    def complete_restoration(self) -> None:
        self.completed = True

    def buffered_size(self, _tp: TopicPartition) -> int:
        return 0


def test_a_partition_paused_without_a_task_is_resumed_by_the_next_task_that_runs_it(thread):
    tp = TopicPartition("in", 0)
    consumer = thread.consumer = PausingConsumer({KafkaTopicPartition("in", 0)})
    tasks = thread.task_manager
    tasks.pause([tp])  # the active tasks were dropped outside the group; the partition stays assigned
    tasks.resume_drained_partitions()  # no task owns it: it must stay paused, and known to be
    assert consumer.paused_partitions == {KafkaTopicPartition("in", 0)}

    task = RestoredTask([tp])  # the new assignment keeps the partition: a task runs it again
    tasks.tasks[TaskId(0, 0)] = task
    tasks.restoration_completed(TaskId(0, 0))
    assert task.completed and consumer.paused_partitions == set()


def test_a_paused_partition_no_longer_assigned_is_forgotten(thread):
    tp = TopicPartition("in", 0)
    consumer = thread.consumer = PausingConsumer({KafkaTopicPartition("in", 0)})
    tasks = thread.task_manager
    tasks.pause([tp])
    consumer.assigned.clear()
    consumer.paused_partitions.clear()  # kafka-python drops a revoked partition's state
    tasks.resume_drained_partitions()
    assert tp not in tasks.paused
