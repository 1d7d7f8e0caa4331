"""Spreading one client's tasks over its stream threads (consumer-group members).

Why a separate step: the high-availability task assignor decides per *client* (process),
with capacity = thread count; each thread is a separate consumer, so the group leader must
then split the client's active and standby tasks over those consumers. The split is
balanced (thread loads differ by at most one task) and sticky: a thread keeps the tasks it
ran before whenever balance allows, because under cooperative rebalancing every task that
changes thread costs a revocation and a follow-up rebalance, and a standby that stays on
its thread keeps its store open. Kafka Streams' ``assignTasksToThreads`` plays this role.

Order: stateful actives, then stateless actives (both balanced on active count, since
processing is the main load), then standbys (balanced on active + standby count).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

from airflow_stateful_provider.streams.task_id import TaskId

__all__ = ["ThreadTasks", "assign_tasks_to_threads"]


@dataclasses.dataclass(frozen=True, slots=True)
class ThreadTasks:
    """The tasks one thread (consumer member) is given."""

    active_tasks: frozenset[TaskId] = frozenset()
    standby_tasks: frozenset[TaskId] = frozenset()


def _deal(
    tasks: Collection[TaskId],
    threads: Sequence[str],
    previous: Mapping[str, Collection[TaskId]],
    load: dict[str, int],
) -> dict[str, set[TaskId]]:
    """Give ``tasks`` to ``threads``; ``load`` (updated) counts what each thread already has.

    1. Each thread keeps its previous tasks while it is below the floor of the average load.
    2. Every other task, in task-id order, goes to a least-loaded thread, preferring one that
       ran the task before, else the first in ``threads`` order; dealing in task-id order
       spreads each subtopology's partitions over the threads.
    """
    dealt: dict[str, set[TaskId]] = {t: set() for t in threads}
    if not tasks:
        return dealt
    remaining = set(tasks)
    floor = (len(remaining) + sum(load[t] for t in threads)) // len(threads)
    for thread in threads:
        for task in sorted(set(previous.get(thread, ())) & remaining):
            if load[thread] >= floor:
                break
            dealt[thread].add(task)
            remaining.discard(task)
            load[thread] += 1
    for task in sorted(remaining):
        least = min(load[t] for t in threads)
        candidates = [t for t in threads if load[t] == least]
        chosen = next((t for t in candidates if task in previous.get(t, ())), candidates[0])
        dealt[chosen].add(task)
        load[chosen] += 1
    return dealt


def assign_tasks_to_threads(
    threads: Sequence[str],
    stateful_active_tasks: Collection[TaskId],
    stateless_active_tasks: Collection[TaskId],
    standby_tasks: Collection[TaskId],
    previous_active_tasks: Mapping[str, Collection[TaskId]],
    previous_standby_tasks: Mapping[str, Collection[TaskId]],
) -> dict[str, ThreadTasks]:
    """Split one client's tasks over its threads (member ids, in a stable order).

    Actives stick to the thread that ran them as active; standbys to the thread that had
    them as standby, else as active (an active turning standby on the same thread keeps
    its store). A task is never both active and standby on one client, so no thread gets
    both roles of a task.
    """
    if not threads:
        raise ValueError("assign_tasks_to_threads needs at least one thread")
    if len(set(threads)) != len(threads):
        raise ValueError(f"thread ids must be distinct, got {list(threads)}")
    load = {t: 0 for t in threads}
    active = _deal(stateful_active_tasks, threads, previous_active_tasks, load)
    stateless = _deal(stateless_active_tasks, threads, previous_active_tasks, load)
    standby_preference = {
        t: frozenset(previous_standby_tasks.get(t, ())) | frozenset(previous_active_tasks.get(t, ()))
        for t in threads
    }
    standby = _deal(standby_tasks, threads, standby_preference, load)
    return {
        t: ThreadTasks(frozenset(active[t] | stateless[t]), frozenset(standby[t]))
        for t in threads
    }
