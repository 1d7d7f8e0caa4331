"""Convergence (docs/semantics.md §3): repeated probing rebalances settle on a valid, balanced assignment.

Each round runs the assignor, then every assigned task catches up (simulation.py), until the
assignor stops asking for a probing rebalance. Bounds:

- everything already caught up: 1 round (nothing to move);
- any static cluster: ``round_bound`` = ceil(T * min(n, 1 + standbys) / max_warmup) + 1 (see
  its docstring for why);
- one node added to or removed from ten (Kafka Streams' own convergence scenarios, 11 or 13
  stateful tasks, 2 warmups): at most T / max_warmup + 1 (+1 when removing), a handful.

Balanced means: over all clients, max - min of active tasks per thread (stateful and
stateless actives over the client's capacity) is at most 1; with equal capacities and no
rack-aware tags, stateful copies (active + standby) per thread are balanced within 1 as well.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_stateful_provider.streams.assignment.assignment_configs import AssignmentConfigs
from airflow_stateful_provider.streams.assignment.client_state import ClientState
from airflow_stateful_provider.streams.assignment.lag import LATEST_OFFSET
from airflow_stateful_provider.streams.task_id import TaskId
from tests.unit.streams.assignment.simulation import (
    active_load_skew,
    assert_valid,
    round_bound,
    run_until_stable,
    stateful_load_skew,
)

ACCEPTABLE_LAG = 100
SETTINGS = settings(
    max_examples=150, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def task_ids(count: int, first_subtopology: int = 0) -> list[TaskId]:
    """``count`` tasks spread over subtopologies of up to 5 partitions."""
    return [TaskId(first_subtopology + i // 5, i % 5) for i in range(count)]


def pid(i: int) -> str:
    return f"client-{i:02d}"


@st.composite
def clusters(draw: st.DrawFn, max_clients: int = 10
             ) -> tuple[list[ClientState], frozenset[TaskId], frozenset[TaskId], AssignmentConfigs, bool]:
    num_clients = draw(st.integers(1, max_clients))
    num_stateful = draw(st.integers(1, 30))
    num_stateless = draw(st.integers(0, 10))
    stateful = task_ids(num_stateful)
    stateless = task_ids(num_stateless, first_subtopology=10)
    rack_aware = draw(st.booleans())
    configs = AssignmentConfigs(
        acceptable_recovery_lag=ACCEPTABLE_LAG,
        max_warmup_replicas=draw(st.integers(1, 3)),
        num_standby_replicas=draw(st.integers(0, 2)),
        probing_rebalance_interval_ms=60_000,
        rack_aware_assignment_tags=("zone", "cluster") if rack_aware else (),
    )
    tags = st.one_of(
        st.just({}),
        st.fixed_dictionaries({"zone": st.sampled_from("abc"), "cluster": st.sampled_from("xy")}),
    )
    lag_values = st.one_of(
        st.none(),  # no state
        st.just(LATEST_OFFSET),
        st.integers(0, ACCEPTABLE_LAG),
        st.integers(ACCEPTABLE_LAG + 1, 10_000),
    )
    states = []
    for i in range(num_clients):
        lags = {}
        for task in stateful:
            lag = draw(lag_values)
            if lag is not None:
                lags[task] = lag
        previous = draw(st.lists(st.sampled_from(stateful + stateless), max_size=6, unique=True))
        split = draw(st.integers(0, len(previous)))
        states.append(
            ClientState(
                pid(i),
                capacity=draw(st.integers(1, 4)),
                previous_active_tasks=frozenset(previous[:split]),
                previous_standby_tasks=frozenset(previous[split:]),
                task_lags=lags,
                client_tags=draw(tags),
            )
        )
    keep_unassigned_state = draw(st.booleans())
    return states, frozenset(stateful), frozenset(stateless), configs, keep_unassigned_state


def assert_settled_state(result, states, stateful, stateless, configs) -> None:
    assert_valid(result, stateful, stateless, configs.num_standby_replicas)
    assert not any(a.warmup_tasks for a in result.clients.values())
    capacities = {s.process_id: s.capacity for s in states}
    assert active_load_skew(result, capacities) <= 1.0
    if len(set(capacities.values())) == 1 and not configs.rack_aware_assignment_tags:
        # Kafka Streams balances standbys by the same rule; with unequal capacities, or with
        # rack-aware placement restricting standby moves, it does not promise this (its own
        # convergence tests use capacity 1 and no tags).
        assert stateful_load_skew(result, capacities, stateful) <= 1.0


@SETTINGS
@given(clusters())
def test_random_static_cluster_settles_within_bound(cluster) -> None:
    states, stateful, stateless, configs, keep = cluster
    bound = round_bound(len(stateful), len(states), configs)
    outcome = run_until_stable(states, stateful, stateless, configs, max_rounds=bound, keep_unassigned_state=keep)
    event(f"clients={len(states)} tasks={len(stateful)}")
    event(f"rounds={outcome.rounds}")
    assert_settled_state(outcome.result, outcome.states, stateful, stateless, configs)
    # Settled means settled: one more round changes nothing and asks for nothing.
    again = run_until_stable(outcome.states, stateful, stateless, configs, max_rounds=1)
    assert dict(again.result.clients) == dict(outcome.result.clients)


@SETTINGS
@given(clusters(), st.data())
def test_everything_caught_up_settles_in_one_round(cluster, data) -> None:
    """docs/semantics.md §3: "a static cluster that is already caught up settles in one round", when
    every client is caught up on every task."""
    states, stateful, stateless, configs, _ = cluster
    caught_up = [
        dataclasses.replace(
            s, task_lags={task: data.draw(st.sampled_from([LATEST_OFFSET, 0, ACCEPTABLE_LAG])) for task in stateful}
        )
        for s in states
    ]
    outcome = run_until_stable(caught_up, stateful, stateless, configs, max_rounds=1)
    assert outcome.rounds == 1
    assert_settled_state(outcome.result, outcome.states, stateful, stateless, configs)


@SETTINGS
@given(clusters(max_clients=9), st.data())
def test_adding_or_removing_a_node_settles(cluster, data) -> None:
    """Settle, then add one client without state or remove one, and settle again."""
    states, stateful, stateless, configs, keep = cluster
    outcome = run_until_stable(
        states, stateful, stateless, configs,
        max_rounds=round_bound(len(stateful), len(states), configs), keep_unassigned_state=keep,
    )
    settled = outcome.states
    if len(settled) > 1 and data.draw(st.booleans()):
        victim = data.draw(st.integers(0, len(settled) - 1))
        changed = settled[:victim] + settled[victim + 1:]
    else:
        changed = [*settled, ClientState("client-99", capacity=data.draw(st.integers(1, 4)))]
    again = run_until_stable(
        changed, stateful, stateless, configs,
        max_rounds=round_bound(len(stateful), len(changed), configs), keep_unassigned_state=keep,
    )
    assert_settled_state(again.result, again.states, stateful, stateless, configs)


def _ten_node_cluster(num_stateful: int, num_stateless: int, num_clients: int):
    stateful = frozenset(task_ids(num_stateful))
    stateless = frozenset(task_ids(num_stateless, first_subtopology=10))
    configs = AssignmentConfigs(acceptable_recovery_lag=100, max_warmup_replicas=2,
                                num_standby_replicas=0, probing_rebalance_interval_ms=60_000)
    states = [ClientState(pid(i)) for i in range(num_clients)]
    settled = run_until_stable(states, stateful, stateless, configs, max_rounds=1)
    return settled, stateful, stateless, configs


def test_adding_a_node_to_ten_settles_in_a_handful_of_rounds() -> None:
    """Kafka Streams' assignmentShouldConvergeAfterAddingNode, with ten nodes: 11 stateful and
    7 stateless tasks, 2 warmups; each task moves at most once, two at a time."""
    settled, stateful, stateless, configs = _ten_node_cluster(11, 7, 10)
    assert settled.rounds == 1  # nobody has state: nothing to wait for
    grown = [*settled.states, ClientState(pid(10))]
    outcome = run_until_stable(grown, stateful, stateless, configs, max_rounds=len(stateful) // 2 + 1)
    assert outcome.rounds <= 6
    assert_settled_state(outcome.result, outcome.states, stateful, stateless, configs)
    assert outcome.result.clients[pid(10)].active_tasks  # the new node got work


def test_removing_a_node_of_ten_settles_in_a_handful_of_rounds() -> None:
    """Kafka Streams' droppingNodesShouldConverge with ten nodes: 13 stateful and 11 stateless
    tasks, 2 warmups; KS allows one round more than for adding, as round-robin shifts tasks
    back towards the first clients."""
    settled, stateful, stateless, configs = _ten_node_cluster(13, 11, 10)
    shrunk = settled.states[1:]
    outcome = run_until_stable(shrunk, stateful, stateless, configs, max_rounds=len(stateful) // 2 + 2)
    assert outcome.rounds <= 8
    assert_settled_state(outcome.result, outcome.states, stateful, stateless, configs)


def _random_cluster(rng: random.Random, clients: range) -> list[ClientState]:
    return [
        ClientState(
            pid(i),
            capacity=rng.randint(1, 4),
            client_tags={"zone": rng.choice("abc"), "cluster": rng.choice("xy")},
        )
        for i in clients
    ]


@pytest.mark.parametrize("seed", range(40))
def test_seeded_cluster_perturbations_settle(seed: int) -> None:
    """Kafka Streams' randomClusterPerturbationsShouldConverge, seeded: a random cluster settles,
    then nodes are dropped, added or resurrected (with the state they had) several times; after
    every event it settles again within the static bound, valid and balanced."""
    rng = random.Random(seed)
    stateful = frozenset(task_ids(rng.randint(1, 30)))
    stateless = frozenset(task_ids(rng.randint(0, 10), first_subtopology=10))
    configs = AssignmentConfigs(
        acceptable_recovery_lag=ACCEPTABLE_LAG,
        max_warmup_replicas=rng.randint(1, 3),
        num_standby_replicas=rng.randint(0, 2),
        probing_rebalance_interval_ms=60_000,
        rack_aware_assignment_tags=("zone", "cluster") if rng.random() < 0.5 else (),
    )
    keep = rng.random() < 0.5
    states = _random_cluster(rng, range(rng.randint(1, 10)))
    next_id = len(states)
    dropped: list[ClientState] = []
    for _event in range(rng.randint(1, 4)):
        outcome = run_until_stable(
            states, stateful, stateless, configs,
            max_rounds=round_bound(len(stateful), len(states), configs), keep_unassigned_state=keep,
        )
        assert_settled_state(outcome.result, outcome.states, stateful, stateless, configs)
        states = outcome.states
        if len(states) > 1 and rng.random() < 0.5:
            for _ in range(rng.randint(1, len(states) - 1)):
                dropped.append(states.pop(rng.randrange(len(states))))
        else:
            for _ in range(rng.randint(1, 3)):
                if dropped and rng.random() < 0.5:
                    states.append(dropped.pop(rng.randrange(len(dropped))))
                else:
                    states.extend(_random_cluster(rng, range(next_id, next_id + 1)))
                    next_id += 1
