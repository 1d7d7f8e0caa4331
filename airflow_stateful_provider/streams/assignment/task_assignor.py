"""The high-availability task assignor (KIP-441): which client runs which task, and which keep copies.

Why this shape: the group leader must hand out tasks so that (a) load is balanced over stream
threads and (b) no task stops for a long restore. The two conflict when a client joins or has
lost its state. The assignor computes the balanced assignment it wants, then, wherever that
would put an active task on a client that is not caught up, keeps the task on a caught-up
client for now and gives the intended client a warmup copy; a probing rebalance scheduled
``probing_rebalance_interval_ms`` later re-runs the assignment, and the move happens once the
warmup has caught up. Repeated rounds converge on the balanced assignment.

The module is pure: no Kafka, no clock, no randomness. Same input, same output (clients are
taken in process-id order, tasks in task-id order). It mirrors Kafka Streams'
``HighAvailabilityTaskAssignor`` (see docs/task-assignment.md for the walk-through); the
rack-aware *traffic* optimisation of KIP-925 (broker racks) is not part of it.

A group assignor calls it as::

    lags = compute_task_lags(member_offset_sums, end_offset_sums)   # per client
    result = assign(
        [ClientState(pid, capacity=threads, previous_active_tasks=..., previous_standby_tasks=...,
                     task_lags=lags, client_tags=tags) for ...],
        stateful_tasks, stateless_tasks, configs, now_ms,
    )
    result.clients[pid].active_tasks / .standby_tasks / .warmup_tasks
    result.next_probing_rebalance_ms  # None when the assignment is final
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from types import MappingProxyType

from airflow_stateful_provider.streams.assignment.assignment_configs import AssignmentConfigs
from airflow_stateful_provider.streams.assignment.client_state import (
    AssignedClient,
    ClientState,
    InvalidAssignmentInputError,
    ProcessId,
)
from airflow_stateful_provider.streams.assignment.constrained_priority_set import (
    ConstrainedPrioritySet,
)
from airflow_stateful_provider.streams.assignment.lag import LATEST_OFFSET, is_caught_up
from airflow_stateful_provider.streams.assignment.standby_placement import (
    assign_standby_tasks,
    is_allowed_standby_movement,
)
from airflow_stateful_provider.streams.assignment.task_movement import (
    WarmupBudget,
    assign_active_task_movements,
    assign_standby_task_movements,
)
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = [
    "AssignmentResult",
    "ClientAssignment",
    "assign",
    "assign_without_lags",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ClientAssignment:
    """What one client is told to run.

    ``standby_tasks`` includes the warmups; ``warmup_tasks`` says which of them are warmups
    (extra copies placed to prepare a move, dropped once the move happened).
    """

    active_tasks: frozenset[TaskId] = frozenset()
    standby_tasks: frozenset[TaskId] = frozenset()
    warmup_tasks: frozenset[TaskId] = frozenset()

    @property
    def hot_standby_tasks(self) -> frozenset[TaskId]:
        """Standbys that are not warmups (the ``num_standby_replicas`` copies)."""
        return self.standby_tasks - self.warmup_tasks


@dataclasses.dataclass(frozen=True, slots=True)
class AssignmentResult:
    """The assignment of every client, and whether a probing rebalance must follow.

    ``clients`` iterates in process-id order. ``probing_rebalance_needed`` is True when some
    task or standby was kept away from the client the balanced assignment wants (because that
    client is not caught up yet); ``next_probing_rebalance_ms`` is then ``now_ms +
    probing_rebalance_interval_ms``, else None. The two movement counts say how many such
    decisions were made (for logs and status).
    """

    clients: Mapping[ProcessId, ClientAssignment]
    probing_rebalance_needed: bool
    next_probing_rebalance_ms: int | None
    active_task_movements: int = 0
    standby_task_movements: int = 0

    def active_owner(self, task: TaskId) -> ProcessId | None:
        """The client running ``task`` as active, or None when no client does."""
        for pid, assignment in self.clients.items():
            if task in assignment.active_tasks:
                return pid
        return None


def _validate_tasks(name: str, tasks: Iterable[TaskId]) -> frozenset[TaskId]:
    if isinstance(tasks, (str, bytes)):
        raise InvalidAssignmentInputError(f"{name} must be a collection of task ids, got {tasks!r}")
    try:
        result = frozenset(tasks)
    except TypeError as exc:
        raise InvalidAssignmentInputError(f"{name} must be a collection of task ids, got {tasks!r}") from exc
    for task in result:
        if isinstance(task, (str, bytes)):
            raise InvalidAssignmentInputError(
                f"{name} must hold task ids (e.g. TaskId(0, 1)), got the string {task!r}"
            )
    return result


def _least_lag_first(states: Mapping[ProcessId, AssignedClient], task: TaskId,
                     ) -> Callable[[ProcessId], tuple[int, ProcessId]]:
    """Sort key of clients for ``task``: the least lag on it first, then by process id."""
    return lambda pid: (states[pid].lag_for(task), pid)


def _sorted_clients(clients: Iterable[ClientState]) -> dict[ProcessId, AssignedClient]:
    states = list(clients)
    if not states:
        raise InvalidAssignmentInputError("assign() needs at least one client, got none")
    by_pid: dict[ProcessId, ClientState] = {}
    for state in states:
        if not isinstance(state, ClientState):
            raise InvalidAssignmentInputError(
                f"clients must be ClientState objects, got {type(state).__name__} {state!r}"
            )
        if state.process_id in by_pid:
            raise InvalidAssignmentInputError(f"duplicate process id {state.process_id!s}")
        by_pid[state.process_id] = state
    kinds = {isinstance(pid, uuid.UUID) for pid in by_pid}
    if len(kinds) > 1:
        raise InvalidAssignmentInputError(
            "process ids must be all str or all uuid.UUID (they are sorted), got "
            f"{sorted(map(str, by_pid))}"
        )
    return {pid: AssignedClient(by_pid[pid]) for pid in sorted(by_pid)}


def _should_move_a_task(source: AssignedClient, destination: AssignedClient) -> bool:
    """Moving one task from source to destination strictly reduces their load difference
    without reversing it."""
    skew = source.assigned_task_load() - destination.assigned_task_load()
    if skew <= 0:
        return False
    proposed_at_destination = (destination.assigned_task_count() + 1.0) / destination.capacity
    proposed_at_source = (source.assigned_task_count() - 1.0) / source.capacity
    proposed_skew = proposed_at_source - proposed_at_destination
    if proposed_skew < 0:
        return False  # would only create an imbalance the other way
    return proposed_skew < skew


def _balance_tasks_over_threads(
    clients: Mapping[ProcessId, AssignedClient],
    tasks_of: Callable[[AssignedClient], Collection[TaskId]],
    unassign: Callable[[AssignedClient, TaskId], None],
    assign_to: Callable[[AssignedClient, TaskId], None],
    may_move: Callable[[AssignedClient, AssignedClient], bool],
) -> None:
    """Move tasks (of one kind) between client pairs until no move reduces the skew of tasks
    per thread. Terminates: every move strictly decreases sum(count**2 / capacity)."""
    keep_balancing = True
    while keep_balancing:
        keep_balancing = False
        for source in clients.values():
            for destination in clients.values():
                if source is destination:
                    continue
                for task in sorted(tasks_of(source)):
                    if not _should_move_a_task(source, destination):
                        break
                    if not destination.has_assigned_task(task) and may_move(source, destination):
                        unassign(source, task)
                        assign_to(destination, task)
                        keep_balancing = True


def _assign_active_stateful_tasks(
    clients: Mapping[ProcessId, AssignedClient], stateful_tasks: list[TaskId]
) -> None:
    """Round-robin over clients in process-id order, then balance over threads."""
    ring = list(clients.values())
    for index, task in enumerate(stateful_tasks):
        ring[index % len(ring)].assign_active(task)
    _balance_tasks_over_threads(
        clients,
        lambda c: c.active_tasks,
        AssignedClient.unassign_active,
        AssignedClient.assign_active,
        lambda source, destination: True,
    )


def _assign_standby_replica_tasks(
    clients: Mapping[ProcessId, AssignedClient],
    stateful_tasks: list[TaskId],
    configs: AssignmentConfigs,
) -> None:
    if configs.num_standby_replicas == 0:
        return
    tags = configs.rack_aware_assignment_tags
    assign_standby_tasks(clients, stateful_tasks, configs.num_standby_replicas, tags)
    _balance_tasks_over_threads(
        clients,
        lambda c: c.standby_tasks,
        AssignedClient.unassign_standby,
        AssignedClient.assign_standby,
        lambda source, destination: is_allowed_standby_movement(source, destination, tags),
    )


def _assign_stateless_active_tasks(
    clients: Mapping[ProcessId, AssignedClient], stateless_tasks: list[TaskId]
) -> None:
    """Each stateless task to the client with the fewest active tasks per thread."""
    by_active_load: ConstrainedPrioritySet[ProcessId, TaskId] = ConstrainedPrioritySet(
        lambda pid, task: True, lambda pid: clients[pid].active_task_load()
    )
    by_active_load.offer_all(clients)
    for task in stateless_tasks:
        pid = by_active_load.poll(task)
        assert pid is not None  # the constraint accepts every client
        clients[pid].assign_active(task)
        by_active_load.offer(pid)


def assign(
    clients: Iterable[ClientState],
    stateful_tasks: Iterable[TaskId],
    stateless_tasks: Iterable[TaskId] = (),
    configs: AssignmentConfigs | None = None,
    now_ms: int = 0,
) -> AssignmentResult:
    """Assign every task to the clients (docs/semantics.md §3, Kafka Streams' HighAvailabilityTaskAssignor).

    Steps: (1) stateful actives round-robin over clients in process-id order; (2) balanced over
    threads; (3) standbys on the least-loaded clients not holding the task (rack-aware when
    ``configs.rack_aware_assignment_tags`` is set), balanced likewise; (4) actives on clients
    that are not caught up while a more caught-up client exists move to a caught-up client
    (swapping with its standby if it has one, else the least-loaded caught-up client, else the
    most caught-up client), the intended client keeping a warmup while ``max_warmup_replicas``
    lasts; (5) the same for standbys; (6) stateless tasks to the fewest actives per thread;
    (7) a probing rebalance is needed when (4) or (5) moved anything.
    """
    configs = configs if configs is not None else AssignmentConfigs()
    if not isinstance(configs, AssignmentConfigs):
        raise InvalidAssignmentInputError(
            f"configs must be AssignmentConfigs, got {type(configs).__name__} {configs!r}"
        )
    if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < 0:
        raise InvalidAssignmentInputError(f"now_ms must be an int >= 0, got {now_ms!r}")
    stateful = _validate_tasks("stateful_tasks", stateful_tasks)
    stateless = _validate_tasks("stateless_tasks", stateless_tasks)
    both = stateful & stateless
    if both:
        raise InvalidAssignmentInputError(
            f"tasks cannot be both stateful and stateless: {[str(t) for t in sorted(both)]}"
        )
    states = _sorted_clients(clients)
    sorted_stateful = sorted(stateful)

    _assign_active_stateful_tasks(states, sorted_stateful)
    _assign_standby_replica_tasks(states, sorted_stateful, configs)

    caught_up_clients = {
        task: frozenset(
            pid for pid, client in states.items()
            if is_caught_up(client.lag_for(task), configs.acceptable_recovery_lag)
        )
        for task in sorted_stateful
    }
    clients_by_lag = {
        task: tuple(sorted(states, key=_least_lag_first(states, task)))
        for task in sorted_stateful
    }
    warmups: dict[ProcessId, set[TaskId]] = {}
    budget = WarmupBudget(configs.max_warmup_replicas)
    active_moves = assign_active_task_movements(caught_up_clients, clients_by_lag, states, warmups, budget)
    standby_moves = assign_standby_task_movements(caught_up_clients, clients_by_lag, states, warmups, budget)

    _assign_stateless_active_tasks(states, sorted(stateless))

    probing = active_moves + standby_moves > 0
    result_clients = {
        pid: ClientAssignment(
            active_tasks=frozenset(client.active_tasks),
            standby_tasks=frozenset(client.standby_tasks),
            warmup_tasks=frozenset(warmups.get(pid, set()) & client.standby_tasks),
        )
        for pid, client in states.items()
    }
    return AssignmentResult(
        clients=MappingProxyType(result_clients),
        probing_rebalance_needed=probing,
        next_probing_rebalance_ms=now_ms + configs.probing_rebalance_interval_ms if probing else None,
        active_task_movements=active_moves,
        standby_task_movements=standby_moves,
    )


def assign_without_lags(
    clients: Iterable[ClientState],
    stateful_tasks: Iterable[TaskId],
    stateless_tasks: Iterable[TaskId] = (),
    configs: AssignmentConfigs | None = None,
    now_ms: int = 0,
) -> AssignmentResult:
    """Sticky fallback for when the leader could not fetch changelog end offsets.

    Without end offsets no lag is known, so lags are inferred from previous ownership: a
    previous active counts as running (-2); a previous standby has state of unknown freshness,
    so it ranks behind running actives but ahead of clients without state (lag
    ``acceptable_recovery_lag + 1``: not caught up); anything else has no state. Reported lags
    are ignored. The regular algorithm then leaves actives with their previous owners (or,
    when the owner is gone, with a previous standby), and the result always asks for a
    probing rebalance, so a lag-based assignment follows once end offsets can be read. Kafka
    Streams falls back to its legacy sticky assignor instead, and likewise always schedules
    the follow-up rebalance.
    """
    configs = configs if configs is not None else AssignmentConfigs()
    inferred = []
    for state in clients:
        if not isinstance(state, ClientState):
            raise InvalidAssignmentInputError(
                f"clients must be ClientState objects, got {type(state).__name__} {state!r}"
            )
        standby_lag = configs.acceptable_recovery_lag + 1
        lags: dict[TaskId, int] = {task: standby_lag for task in state.previous_standby_tasks}
        lags.update({task: LATEST_OFFSET for task in state.previous_active_tasks})
        inferred.append(dataclasses.replace(state, task_lags=lags))
    result = assign(inferred, stateful_tasks, stateless_tasks, configs, now_ms)
    if result.probing_rebalance_needed:
        return result
    return dataclasses.replace(
        result,
        probing_rebalance_needed=True,
        next_probing_rebalance_ms=now_ms + configs.probing_rebalance_interval_ms,
    )

