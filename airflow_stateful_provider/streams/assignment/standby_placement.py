"""Standby placement: where the ``num_standby_replicas`` hot copies of each stateful task go.

Why two strategies: without rack-aware tags the only goal is load (each standby goes to the
least-loaded client not already holding the task). With ``rack_aware_assignment_tags`` the
goal is failure isolation first: a standby should sit on a client whose tag values (zone,
cluster, ...) differ from those of every client already holding the task, so that losing a
zone never loses all copies. That is best effort: when a tag key has no unused value left it
stops constraining, and copies that still cannot be placed fall back to least-loaded clients.
Both mirror Kafka Streams (``DefaultStandbyTaskAssignor``, ``ClientTagAwareStandbyTaskAssignor``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from airflow_stateful_provider.streams.assignment.client_state import AssignedClient, ProcessId
from airflow_stateful_provider.streams.assignment.constrained_priority_set import (
    ConstrainedPrioritySet,
)
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = [
    "assign_standby_tasks",
    "is_allowed_standby_movement",
]

log = logging.getLogger(__name__)

TagEntry = tuple[str, str]


def _least_loaded_not_holding(
    clients: Mapping[ProcessId, AssignedClient],
) -> ConstrainedPrioritySet[ProcessId, TaskId]:
    return ConstrainedPrioritySet(
        lambda pid, task: not clients[pid].has_assigned_task(task),
        lambda pid: clients[pid].assigned_task_load(),
    )


def _place_on_least_loaded(
    clients: Mapping[ProcessId, AssignedClient],
    remaining: dict[TaskId, int],
    by_load: ConstrainedPrioritySet[ProcessId, TaskId],
    task: TaskId,
) -> None:
    """Give ``task`` its remaining standbys on the least-loaded clients that do not hold it."""
    left = remaining[task]
    while left > 0:
        pid = by_load.poll(task)
        if pid is None:
            break
        clients[pid].assign_standby(task)
        left -= 1
        by_load.offer(pid)
    remaining[task] = left


def _warn_about_missing_standbys(remaining: Mapping[TaskId, int], num_standby_replicas: int) -> None:
    missing = {task: left for task, left in remaining.items() if left > 0}
    if missing:
        log.warning(
            "Unable to assign %d of %d standby tasks (%d per task, tasks %s): not enough "
            "clients; add instances to get the requested number of standby replicas.",
            sum(missing.values()), num_standby_replicas * len(remaining), num_standby_replicas,
            ", ".join(str(task) for task in sorted(missing)),
        )


def assign_standby_tasks(
    clients: Mapping[ProcessId, AssignedClient],
    stateful_tasks: Iterable[TaskId],
    num_standby_replicas: int,
    rack_aware_assignment_tags: tuple[str, ...],
) -> None:
    """Place standbys for every stateful task, which must already have its active.

    ``clients`` must iterate in process-id order and ``stateful_tasks`` in task order; the
    result is then deterministic.
    """
    tasks = list(stateful_tasks)
    if num_standby_replicas <= 0:
        return
    remaining = {task: num_standby_replicas for task in tasks}
    by_load = _least_loaded_not_holding(clients)
    if not rack_aware_assignment_tags:
        by_load.offer_all(clients)
        for task in tasks:
            _place_on_least_loaded(clients, remaining, by_load, task)
        _warn_about_missing_standbys(remaining, num_standby_replicas)
        return

    tag_keys = frozenset(rack_aware_assignment_tags)
    tag_key_to_values: dict[str, set[str]] = {}
    tag_entry_to_clients: dict[TagEntry, set[ProcessId]] = {}
    for pid, client in clients.items():
        for key, value in client.client_tags.items():
            tag_key_to_values.setdefault(key, set()).add(value)
            tag_entry_to_clients.setdefault((key, value), set()).add(pid)

    pending: list[TaskId] = []
    for task in tasks:
        for pid, client in clients.items():
            if task in client.active_tasks:
                if _assign_on_different_tags(
                    clients, by_load, task, pid, tag_keys, remaining,
                    tag_key_to_values, tag_entry_to_clients,
                ):
                    pending.append(task)
    if pending:
        log.warning(
            "Rack-aware standby placement over tags %s could not place all standbys of %s; "
            "placing the rest on the least-loaded clients. Run instances with more distinct "
            "tag values to get full isolation.",
            list(rack_aware_assignment_tags), [str(t) for t in pending],
        )
        by_load.offer_all(clients)
        for task in pending:
            _place_on_least_loaded(clients, remaining, by_load, task)
    _warn_about_missing_standbys(remaining, num_standby_replicas)


def _assign_on_different_tags(
    clients: Mapping[ProcessId, AssignedClient],
    by_load: ConstrainedPrioritySet[ProcessId, TaskId],
    task: TaskId,
    active_client: ProcessId,
    tag_keys: frozenset[str],
    remaining: dict[TaskId, int],
    tag_key_to_values: Mapping[str, set[str]],
    tag_entry_to_clients: Mapping[TagEntry, set[ProcessId]],
) -> bool:
    """Place ``task``'s standbys one by one on clients sharing no (still constraining) tag value
    with the clients already holding it; returns True when some could not be placed.

    A tag key stops constraining once as many clients hold the task as the key has distinct
    values: all its values are used, and insisting would exclude every client.
    """
    by_load.offer_all(clients)
    used_clients = 1  # the active's client
    left = remaining[task]
    used_entries: dict[TagEntry, set[ProcessId]] = {}
    last_used = active_client
    while True:
        for key, value in clients[last_used].client_tags.items():
            if key not in tag_keys:
                continue
            all_values = tag_key_to_values[key]
            if len(all_values) <= used_clients:
                for other in all_values:
                    used_entries.pop((key, other), None)
            else:
                used_entries[(key, value)] = tag_entry_to_clients[(key, value)]

        def on_unused_values(pid: ProcessId) -> bool:
            return not any(pid in holders for holders in used_entries.values())

        chosen = by_load.poll(task, on_unused_values)
        if chosen is None:
            break
        used_clients += 1
        left -= 1
        clients[chosen].assign_standby(task)
        last_used = chosen
        if left <= 0:
            break
    remaining[task] = left
    return left > 0


def is_allowed_standby_movement(
    source: AssignedClient, destination: AssignedClient, rack_aware_assignment_tags: tuple[str, ...]
) -> bool:
    """May thread balancing move a standby from ``source`` to ``destination``?

    Always without rack-aware tags. With them, only between clients with identical tags
    (every tag of the source has the same value on the destination), so balancing never
    undoes the isolation the placement achieved. Kafka Streams compares all client tags,
    not only the configured keys; so do we.
    """
    if not rack_aware_assignment_tags:
        return True
    dest_tags = destination.client_tags
    return all(dest_tags.get(key) == value for key, value in source.client_tags.items())
