"""Task movements: hand tasks back to caught-up clients and warm up the clients they should go to.

Why: the balanced assignment computed first ignores state, so it may place an active task on
a client that would need to restore a long changelog before processing. Instead of stopping
the task for that long, the task goes (for now) to a client that is caught up, and the
intended client receives a *warmup* standby that restores in the background; once it has
caught up, a later probing rebalance finds the balanced assignment valid and the task moves
with almost no downtime. ``max_warmup_replicas`` bounds how many warmups one round creates.
Mirrors Kafka Streams' ``TaskMovement``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from airflow_stateful_provider.streams.assignment.client_state import AssignedClient, ProcessId
from airflow_stateful_provider.streams.assignment.constrained_priority_set import (
    ConstrainedPrioritySet,
)
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = [
    "WarmupBudget",
    "assign_active_task_movements",
    "assign_standby_task_movements",
]


@dataclasses.dataclass
class WarmupBudget:
    """Warmups still available in this assignment (shared by active and standby movements)."""

    remaining: int

    def take(self) -> bool:
        """Use one warmup if any is left."""
        available = self.remaining > 0
        self.remaining -= 1
        return available


@dataclasses.dataclass(frozen=True)
class _Movement:
    """Task ``task`` should end up on ``destination``, which is not caught up on it yet."""

    task: TaskId
    destination: ProcessId
    num_caught_up_clients: int

    def sort_key(self) -> tuple[int, TaskId]:
        # Tasks with the fewest caught-up clients first: they have the fewest options.
        return (self.num_caught_up_clients, self.task)


def _needs_movement(
    task: TaskId,
    pid: ProcessId,
    clients: Mapping[ProcessId, AssignedClient],
    caught_up_clients: Mapping[TaskId, frozenset[ProcessId]],
    clients_by_lag: Mapping[TaskId, tuple[ProcessId, ...]],
) -> bool:
    """The client is not caught up on the task and some client is strictly more caught up."""
    if pid in caught_up_clients[task]:
        return False
    most_caught_up_lag = clients[clients_by_lag[task][0]].lag_for(task)
    return most_caught_up_lag < clients[pid].lag_for(task)


def _most_caught_up_eligible_client(
    clients_by_lag: Mapping[TaskId, tuple[ProcessId, ...]],
    task: TaskId,
    destination: ProcessId,
    eligible: Callable[[ProcessId], bool] | None = None,
) -> ProcessId | None:
    """The first eligible client ahead of ``destination`` in (lag, process id) order, or None."""
    for pid in clients_by_lag[task]:
        if pid == destination:
            return None
        if eligible is None or eligible(pid):
            return pid
    return None


def _swap_standby_and_active(task: TaskId, source: AssignedClient, destination: AssignedClient) -> None:
    source.unassign_standby(task)
    source.assign_active(task)
    destination.unassign_active(task)
    destination.assign_standby(task)


def _move_active_and_try_to_warm_up(
    budget: WarmupBudget,
    task: TaskId,
    source: AssignedClient,
    destination: AssignedClient,
    warmups: dict[ProcessId, set[TaskId]],
) -> None:
    source.assign_active(task)
    destination.unassign_active(task)
    if budget.take():
        destination.assign_standby(task)
        warmups.setdefault(destination.process_id, set()).add(task)
    # else: no warmup left; the destination gets the task in a later round.


def assign_active_task_movements(
    caught_up_clients: Mapping[TaskId, frozenset[ProcessId]],
    clients_by_lag: Mapping[TaskId, tuple[ProcessId, ...]],
    clients: Mapping[ProcessId, AssignedClient],
    warmups: dict[ProcessId, set[TaskId]],
    budget: WarmupBudget,
) -> int:
    """Move each active that sits on a not-caught-up client while a more caught-up one exists.

    Per movement: swap with a caught-up client holding a standby of the task; else give it to
    the least-loaded caught-up client; else to the most caught-up client. The original
    client keeps a warmup standby while the budget lasts. Returns the number of movements.
    """
    by_load: ConstrainedPrioritySet[ProcessId, TaskId] = ConstrainedPrioritySet(
        lambda pid, task: pid in caught_up_clients[task],
        lambda pid: clients[pid].assigned_task_load(),
    )
    movements: list[_Movement] = []
    for pid, client in clients.items():
        for task in sorted(client.active_tasks):
            if _needs_movement(task, pid, clients, caught_up_clients, clients_by_lag):
                movements.append(_Movement(task, pid, len(caught_up_clients[task])))
        by_load.offer(pid)
    movements.sort(key=_Movement.sort_key)

    for movement in movements:
        task, dest_pid = movement.task, movement.destination
        destination = clients[dest_pid]

        source_pid = by_load.poll(task, lambda pid: clients[pid].has_standby_task(task))  # noqa: B023 - called here
        if source_pid is not None:
            _swap_standby_and_active(task, clients[source_pid], destination)
        else:
            source_pid = by_load.poll(task)
            if source_pid is not None:
                _move_active_and_try_to_warm_up(budget, task, clients[source_pid], destination, warmups)
            else:
                source_pid = _most_caught_up_eligible_client(clients_by_lag, task, dest_pid)
                if source_pid is None:
                    raise AssertionError(
                        f"task {task} was scheduled to move off {dest_pid} but no more caught-up client exists"
                    )
                source = clients[source_pid]
                if source.has_standby_task(task):
                    _swap_standby_and_active(task, source, destination)
                else:
                    _move_active_and_try_to_warm_up(budget, task, source, destination, warmups)
        by_load.offer_all((source_pid, dest_pid))
    return len(movements)


def assign_standby_task_movements(
    caught_up_clients: Mapping[TaskId, frozenset[ProcessId]],
    clients_by_lag: Mapping[TaskId, tuple[ProcessId, ...]],
    clients: Mapping[ProcessId, AssignedClient],
    warmups: dict[ProcessId, set[TaskId]],
    budget: WarmupBudget,
) -> int:
    """Likewise for standbys (warmups created above are left alone).

    The standby goes to the least-loaded caught-up client not holding the task, else to the
    most caught-up such client; the original client keeps it as a warmup while the budget
    lasts (recorded in ``warmups``). Returns the number of standbys moved.
    """
    by_load: ConstrainedPrioritySet[ProcessId, TaskId] = ConstrainedPrioritySet(
        lambda pid, task: pid in caught_up_clients[task],
        lambda pid: clients[pid].assigned_task_load(),
    )
    movements: list[_Movement] = []
    for pid, client in clients.items():
        planned_warmups = warmups.get(pid, set())
        for task in sorted(client.standby_tasks):
            if task in planned_warmups:
                continue
            if _needs_movement(task, pid, clients, caught_up_clients, clients_by_lag):
                movements.append(_Movement(task, pid, len(caught_up_clients[task])))
        by_load.offer(pid)
    movements.sort(key=_Movement.sort_key)

    moved = 0
    for movement in movements:
        task, dest_pid = movement.task, movement.destination

        def not_holding(pid: ProcessId, task: TaskId = task) -> bool:
            return not clients[pid].has_assigned_task(task)

        source_pid = by_load.poll(task, not_holding)
        if source_pid is None:
            source_pid = _most_caught_up_eligible_client(clients_by_lag, task, dest_pid, not_holding)
        if source_pid is None:
            continue  # every more caught-up client already holds the task
        clients[source_pid].assign_standby(task)
        if budget.take():
            warmups.setdefault(dest_pid, set()).add(task)
        else:
            clients[dest_pid].unassign_standby(task)
        by_load.offer_all((source_pid, dest_pid))
        moved += 1
    return moved
