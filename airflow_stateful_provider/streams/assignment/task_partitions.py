"""Which input and changelog partitions each task owns, from the topology and the partition counts.

Why here: the group leader turns partition counts into tasks, assigns tasks, and must then
hand each member the *input* partitions of its active tasks and the *changelog* partitions
of its standbys; it also needs the changelog partitions of every stateful task to sum their
end offsets for lags. Task ``s_p`` owns partition ``p`` of every source topic of subtopology
``s`` and partition ``p`` of the changelog ``<application_id>-<store>-changelog`` of each
logged store of ``s`` (docs/architecture.md, "The engine's model"; docs/semantics.md §7).

A task counts as *stateful* for assignment when it has at least one changelog partition:
only then can its state be restored elsewhere, and only then is there a lag to compare.
A subtopology whose stores all have logging disabled is assigned like a stateless one (as in
Kafka Streams, whose lag-based placement also works from changelogs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from kafka.structs import TopicPartition

from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["TaskPartitions", "changelog_topics", "task_partitions"]


@dataclasses.dataclass(frozen=True, slots=True)
class TaskPartitions:
    """Every task of the application with its input and changelog partitions."""

    #: task -> partition p of each of its subtopology's source topics (decorated names).
    input_partitions: Mapping[TaskId, frozenset[TopicPartition]]
    #: task -> partition p of each logged store's changelog (empty for stateless tasks).
    changelog_partitions: Mapping[TaskId, frozenset[TopicPartition]]

    @property
    def tasks(self) -> frozenset[TaskId]:
        return frozenset(self.input_partitions)

    @property
    def stateful_tasks(self) -> frozenset[TaskId]:
        return frozenset(t for t, parts in self.changelog_partitions.items() if parts)

    @property
    def stateless_tasks(self) -> frozenset[TaskId]:
        return self.tasks - self.stateful_tasks

    def all_changelog_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(tp for parts in self.changelog_partitions.values() for tp in parts)

    def task_for_input_partition(self) -> dict[TopicPartition, TaskId]:
        return {tp: task for task, parts in self.input_partitions.items() for tp in parts}


def changelog_topics(topology: Topology, application_id: str, store_names: Iterable[str]) -> list[str]:
    """Changelog topic names of the logged stores among ``store_names``.

    The same rule as ``topics.internal_topics.changelog_topic_configs`` (which creates the
    topics; a unit test checks both agree), restated here so that the assignment package
    does not import the runtime and its store implementations.
    """
    return [f"{application_id}-{store}-changelog" for store in store_names
            if getattr(topology.store_builder(store), "logging_enabled", True)]


def task_partitions(
    topology: Topology, application_id: str, partition_counts: Mapping[str, int]
) -> TaskPartitions:
    """Tasks and their partitions given the partition counts of the source topics (decorated
    names; missing repartition topics are derived). Raises TopologyError for an unknown
    external source topic or source topics that are not co-partitioned."""
    per_subtopology = topology.validate_partition_counts(partition_counts, application_id)
    changelogs_by_sub = {sub.id: changelog_topics(topology, application_id, sub.store_names)
                         for sub in topology.subtopologies()}
    inputs: dict[TaskId, frozenset[TopicPartition]] = {}
    changelogs: dict[TaskId, frozenset[TopicPartition]] = {}
    for sub in topology.subtopologies():
        topics = [topology.decorate_topic(raw, application_id) for raw in sub.source_topics]
        for p in range(per_subtopology[sub.id]):
            task = TaskId(sub.id, p)
            inputs[task] = frozenset(TopicPartition(t, p) for t in topics)
            changelogs[task] = frozenset(TopicPartition(t, p) for t in changelogs_by_sub.get(sub.id, ()))
    return TaskPartitions(MappingProxyType(inputs), MappingProxyType(changelogs))
