"""Rebalance simulation for convergence tests: run the assignor, let every assigned task catch up,
feed the outcome back as the next round's subscriptions, until no probing rebalance is asked for.

Why a model this simple is enough: the assignor only sees lags, previous tasks, capacities and
tags. A round's outcome is summarised by what each client was told to run; after the probing
interval every assigned copy (active, standby or warmup) has caught up, which is the best case
the assignor plans for (docs/semantics.md §3 "Convergence").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

from airflow_stateful_provider.streams.assignment.assignment_configs import AssignmentConfigs
from airflow_stateful_provider.streams.assignment.client_state import ClientState
from airflow_stateful_provider.streams.assignment.lag import LATEST_OFFSET
from airflow_stateful_provider.streams.assignment.task_assignor import AssignmentResult, assign
from airflow_stateful_provider.streams.task_id import TaskId


def next_round_states(
    states: Iterable[ClientState],
    result: AssignmentResult,
    stateful_tasks: frozenset[TaskId],
    *,
    keep_unassigned_state: bool,
) -> list[ClientState]:
    """Subscriptions after every assigned task caught up: running actives report -2, standbys
    and warmups lag 0. State of tasks a client no longer holds is kept as it was (a state
    directory is only cleaned up later) or dropped, per ``keep_unassigned_state``."""
    next_states = []
    for state in states:
        assignment = result.clients[state.process_id]
        lags = dict(state.task_lags) if keep_unassigned_state else {}
        for task in assignment.standby_tasks:
            lags[task] = 0
        for task in assignment.active_tasks & stateful_tasks:
            lags[task] = LATEST_OFFSET
        next_states.append(
            dataclasses.replace(
                state,
                previous_active_tasks=assignment.active_tasks,
                previous_standby_tasks=assignment.standby_tasks,
                task_lags=lags,
            )
        )
    return next_states


@dataclasses.dataclass
class Convergence:
    rounds: int
    states: list[ClientState]
    result: AssignmentResult
    history: list[str]


def run_until_stable(
    states: list[ClientState],
    stateful_tasks: frozenset[TaskId],
    stateless_tasks: frozenset[TaskId],
    configs: AssignmentConfigs,
    *,
    max_rounds: int,
    keep_unassigned_state: bool = True,
) -> Convergence:
    """Assign, catch up, repeat; fail with the round history when ``max_rounds`` is not enough."""
    history: list[str] = []
    rounds = 0
    while True:
        rounds += 1
        result = assign(states, stateful_tasks, stateless_tasks, configs, now_ms=rounds * 1000)
        history.append(describe(rounds, result))
        states = next_round_states(
            states, result, stateful_tasks, keep_unassigned_state=keep_unassigned_state
        )
        if not result.probing_rebalance_needed:
            return Convergence(rounds, states, result, history)
        if rounds >= max_rounds:
            raise AssertionError(
                f"no convergence within {max_rounds} rounds:\n" + "\n".join(history)
            )


def describe(round_no: int, result: AssignmentResult) -> str:
    parts = []
    for pid, a in result.clients.items():
        parts.append(
            f"  {pid}: active={sorted(map(str, a.active_tasks))} "
            f"standby={sorted(map(str, a.hot_standby_tasks))} warmup={sorted(map(str, a.warmup_tasks))}"
        )
    return f"round {round_no} (probing={result.probing_rebalance_needed}):\n" + "\n".join(parts)


def round_bound(num_stateful_tasks: int, num_clients: int, configs: AssignmentConfigs) -> int:
    """Rounds needed at most to settle from any state on a static cluster.

    The assignment the algorithm aims at (round-robin + thread balancing + standby placement)
    does not depend on lags, so it is the same every round. Its (client, task) pairs number at
    most T * min(n, 1 + standbys). A pair that is not caught up either needs a warmup (at most
    ``max_warmup_replicas`` per round, each spent on a distinct pair, which is caught up the
    next round) or gets the task directly (no client is more caught up); a caught-up pair stays
    assigned. So after ceil(pairs / warmups) rounds every pair is caught up, and one more round
    reports "no probing".
    """
    pairs = num_stateful_tasks * min(num_clients, 1 + configs.num_standby_replicas)
    return math.ceil(pairs / configs.max_warmup_replicas) + 1


def assert_valid(
    result: AssignmentResult,
    stateful_tasks: frozenset[TaskId],
    stateless_tasks: frozenset[TaskId],
    num_standby_replicas: int,
) -> None:
    """One active per task; each stateful task on min(clients, 1 + standbys) distinct clients;
    stateless tasks never as standby; no client holds a task twice; no task unknown."""
    all_tasks = stateful_tasks | stateless_tasks
    actives: dict[TaskId, list[object]] = {task: [] for task in all_tasks}
    holders: dict[TaskId, list[object]] = {task: [] for task in all_tasks}
    for pid, a in result.clients.items():
        assert not (a.active_tasks & a.standby_tasks), f"{pid} holds {a.active_tasks & a.standby_tasks} twice"
        assert a.warmup_tasks <= a.standby_tasks
        assert not (a.standby_tasks & stateless_tasks), f"{pid} has stateless standbys"
        for task in a.active_tasks:
            actives[task].append(pid)
            holders[task].append(pid)
        for task in a.standby_tasks:
            holders[task].append(pid)
    assert set(actives) == all_tasks
    copies = min(len(result.clients), 1 + num_standby_replicas)
    for task in sorted(all_tasks):
        assert len(actives[task]) == 1, f"task {task} has actives on {actives[task]}"
        expected = copies if task in stateful_tasks else 1
        assert len(holders[task]) == expected, f"task {task} is on {holders[task]}, expected {expected} clients"


def active_load_skew(result: AssignmentResult, capacities: Mapping[object, int]) -> float:
    """Max minus min over clients of active tasks (stateful and stateless) per thread."""
    loads = [len(a.active_tasks) / capacities[pid] for pid, a in result.clients.items()]
    return max(loads) - min(loads)


def stateful_load_skew(
    result: AssignmentResult, capacities: Mapping[object, int], stateful_tasks: frozenset[TaskId]
) -> float:
    """Max minus min over clients of stateful copies (active + standby) per thread."""
    loads = [
        len((a.active_tasks | a.standby_tasks) & stateful_tasks) / capacities[pid]
        for pid, a in result.clients.items()
    ]
    return max(loads) - min(loads)
