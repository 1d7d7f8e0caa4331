"""The high-availability task assignor beyond the docs/semantics.md §3 scenarios: Kafka Streams'
HighAvailabilityTaskAssignorTest cases, standby movements, determinism, input errors and
the sticky fallback."""

from __future__ import annotations

import random
import uuid

import pytest

from airflow_stateful_provider.streams.assignment.assignment_configs import AssignmentConfigs
from airflow_stateful_provider.streams.assignment.client_state import (
    ClientState,
    InvalidAssignmentInputError,
)
from airflow_stateful_provider.streams.assignment.task_assignor import (
    AssignmentResult,
    assign,
    assign_without_lags,
)
from airflow_stateful_provider.streams.task_id import TaskId
from tests.unit.streams.assignment.simulation import active_load_skew, assert_valid

NINE = [TaskId(s, p) for s in range(3) for p in range(3)]
WITH_STANDBY = AssignmentConfigs(acceptable_recovery_lag=100, max_warmup_replicas=2,
                                 num_standby_replicas=1, probing_rebalance_interval_ms=60_000)
NO_STANDBY = AssignmentConfigs(acceptable_recovery_lag=100, max_warmup_replicas=2,
                               num_standby_replicas=0, probing_rebalance_interval_ms=60_000)


def t(text: str) -> TaskId:
    return TaskId.parse(text)


def counts(result: AssignmentResult) -> dict[str, tuple[int, int]]:
    return {pid: (len(a.active_tasks), len(a.standby_tasks)) for pid, a in result.clients.items()}


def test_sticky_for_actives_and_standbys_while_warming_up() -> None:
    """KS shouldBeStickyForActiveAndStandbyTasksWhileWarmingUp: P1 runs all nine tasks (lag 0),
    P2 holds all nine standbys (lag 10, within the acceptable 11), P3 is new. P1 and P2 keep
    all their copies (nine each, actives now shared between the two caught-up clients) and
    P3 only gets the two warmups the budget allows."""
    configs = AssignmentConfigs(acceptable_recovery_lag=11, max_warmup_replicas=2, num_standby_replicas=1)
    result = assign(
        [
            ClientState("P1", previous_active_tasks=NINE, task_lags={x: 0 for x in NINE}),
            ClientState("P2", previous_standby_tasks=NINE, task_lags={x: 10 for x in NINE}),
            ClientState("P3"),
        ],
        NINE, (), configs,
    )
    assert {pid: a + s for pid, (a, s) in counts(result).items()} == {"P1": 9, "P2": 9, "P3": 2}
    assert len(result.clients["P3"].warmup_tasks) == 2
    assert result.probing_rebalance_needed


def test_no_warmups_when_acceptable_lag_is_unbounded() -> None:
    """KS shouldSkipWarmupsWhenAcceptableLagIsMax: everyone counts as caught up, so the balanced
    assignment is used at once (six copies per client) and no probing is needed."""
    configs = AssignmentConfigs(acceptable_recovery_lag=2**63 - 1, max_warmup_replicas=1, num_standby_replicas=1)
    result = assign(
        [ClientState("P1", previous_active_tasks=NINE, task_lags={x: 0 for x in NINE}),
         ClientState("P2"), ClientState("P3")],
        NINE, (), configs,
    )
    assert {pid: a + s for pid, (a, s) in counts(result).items()} == {"P1": 6, "P2": 6, "P3": 6}
    assert not result.probing_rebalance_needed


def test_actives_balance_over_threads_not_clients() -> None:
    """KS shouldAssignActiveStatefulTasksEvenlyOverStreamThreadsButBestEffortOverClients:
    capacities 6 and 3, nine tasks, equal lags -> 6 and 3 actives, no probing."""
    configs = AssignmentConfigs(acceptable_recovery_lag=0, max_warmup_replicas=1)
    lags = {x: 10 for x in NINE}
    result = assign([ClientState("P1", capacity=6, task_lags=lags), ClientState("P2", capacity=3, task_lags=lags)],
                    NINE, (), configs)
    assert counts(result) == {"P1": (6, 0), "P2": (3, 0)}
    assert not result.probing_rebalance_needed


def test_every_client_gets_actives_whatever_its_capacity() -> None:
    """KS shouldDistributeStatefulActiveTasksToAllClients: capacities 100, 50, 1."""
    lags = {x: 0 for x in NINE}
    result = assign([ClientState(p, capacity=c, task_lags=lags) for p, c in (("P1", 100), ("P2", 50), ("P3", 1))],
                    NINE, (), NO_STANDBY)
    assert all(a.active_tasks for a in result.clients.values())
    assert not result.probing_rebalance_needed


def test_single_client_takes_stateful_and_stateless_tasks() -> None:
    """KS shouldComputeNewAssignmentIfThereAreUnassignedActiveTasks."""
    result = assign([ClientState("P1", previous_active_tasks={t("0_0")}, task_lags={t("0_0"): 0})],
                    {t("0_0")}, {t("0_1")}, NO_STANDBY)
    assert counts(result) == {"P1": (2, 0)}
    assert not result.probing_rebalance_needed


def test_caught_up_standby_is_assigned_without_probing() -> None:
    """KS shouldComputeNewAssignmentIfThereAreUnassignedStandbyTasks: both clients caught up."""
    result = assign([ClientState("P1", previous_active_tasks={t("0_0")}, task_lags={t("0_0"): 0}),
                     ClientState("P2", task_lags={t("0_0"): 0})],
                    {t("0_0")}, (), WITH_STANDBY)
    assert result.clients["P2"].standby_tasks == {t("0_0")}
    assert not result.probing_rebalance_needed


def test_standbys_mirror_caught_up_actives() -> None:
    """KS shouldAssignStandbysForStatefulTasks."""
    result = assign([ClientState("P1", task_lags={t("0_0"): 0}), ClientState("P2", task_lags={t("0_1"): 0})],
                    {t("0_0"), t("0_1")}, (), WITH_STANDBY)
    assert result.clients["P1"].active_tasks == {t("0_0")} and result.clients["P1"].standby_tasks == {t("0_1")}
    assert result.clients["P2"].active_tasks == {t("0_1")} and result.clients["P2"].standby_tasks == {t("0_0")}
    assert not result.probing_rebalance_needed


def test_stateless_tasks_go_to_the_client_with_fewest_actives() -> None:
    """KS shouldDistributeStatelessTasksToBalanceTotalTaskLoad: P1 keeps the four stateful
    actives (only it is caught up), so all three stateless tasks go to P2."""
    stateful = [t(f"0_{p}") for p in range(4)]
    stateless = [t(f"1_{p}") for p in range(3)]
    result = assign([ClientState("P1", task_lags={x: 0 for x in stateful}), ClientState("P2")],
                    stateful, stateless, WITH_STANDBY)
    assert result.clients["P1"].active_tasks == set(stateful)
    assert result.clients["P2"].active_tasks == set(stateless)
    assert result.probing_rebalance_needed


def test_stateless_only_spreads_by_actives_per_thread() -> None:
    """KS shouldDistributeStatelessTasksEvenlyOverClientsWithUnevenlyDistributedStreamThreads...:
    capacities 1, 2, 3 and seven stateless tasks."""
    stateless = [t(f"0_{p}") for p in range(7)]
    caps = {"P1": 1, "P2": 2, "P3": 3}
    result = assign([ClientState(p, capacity=c) for p, c in caps.items()], (), stateless, NO_STANDBY)
    assert_valid(result, frozenset(), frozenset(stateless), 0)
    assert active_load_skew(result, caps) <= 1
    # Greedy by actives per thread, ties by process id: loads end at 2, 1 and 1.
    assert counts(result) == {"P1": (2, 0), "P2": (2, 0), "P3": (3, 0)}
    assert not result.probing_rebalance_needed


def test_standby_on_lagging_client_moves_to_caught_up_client_and_stays_as_warmup() -> None:
    """Step (5): 0_0 runs on P1; placement gives its standby to P2 (no state) although P3 is
    caught up. The standby moves to P3, and P2 keeps a warmup while the budget lasts."""
    result = assign(
        [ClientState("P1", task_lags={t("0_0"): -2}), ClientState("P2"), ClientState("P3", task_lags={t("0_0"): 0})],
        {t("0_0")}, (), WITH_STANDBY,
    )
    assert result.clients["P1"].active_tasks == {t("0_0")}
    assert result.clients["P2"].warmup_tasks == {t("0_0")}
    assert result.clients["P3"].hot_standby_tasks == {t("0_0")}
    assert (result.active_task_movements, result.standby_task_movements) == (0, 1)
    assert result.probing_rebalance_needed


def test_warmup_budget_is_shared_by_active_and_standby_movements() -> None:
    """One warmup for both kinds of movement (Kafka Streams' remainingWarmupReplicas).

    Round-robin: 0_0 -> P1, 0_1 -> P2; standbys: 0_0 -> P3, 0_1 -> P4. Active movement: P1 has
    no state for 0_0, P4 is the only caught-up client and holds no standby of it, so P4 takes
    0_0 and P1 gets the one warmup. Standby movements: 0_0's standby on P3 (lag 5000) has
    nowhere better to go (P4 and P1 hold 0_0); 0_1's standby on P4 (no state) moves to the
    caught-up P3 and, the budget being spent, P4 drops it instead of keeping a warmup."""
    configs = AssignmentConfigs(acceptable_recovery_lag=100, max_warmup_replicas=1, num_standby_replicas=1)
    result = assign(
        [
            ClientState("P1"),
            ClientState("P2", task_lags={t("0_1"): -2}),
            ClientState("P3", task_lags={t("0_0"): 5000, t("0_1"): 0}),
            ClientState("P4", task_lags={t("0_0"): 0}),
        ],
        {t("0_0"), t("0_1")}, (), configs,
    )
    assert {pid: (sorted(map(str, a.active_tasks)), sorted(map(str, a.standby_tasks)), sorted(map(str, a.warmup_tasks)))
            for pid, a in result.clients.items()} == {
        "P1": ([], ["0_0"], ["0_0"]),
        "P2": (["0_1"], [], []),
        "P3": ([], ["0_0", "0_1"], []),
        "P4": (["0_0"], [], []),
    }
    assert (result.active_task_movements, result.standby_task_movements) == (1, 1)


def test_probing_time_is_now_plus_interval() -> None:
    result = assign([ClientState("P1", task_lags={t("0_0"): 500}), ClientState("P2", task_lags={t("0_0"): 0})],
                    {t("0_0")}, (), NO_STANDBY, now_ms=5_000)
    assert result.probing_rebalance_needed
    assert result.next_probing_rebalance_ms == 65_000


def test_same_input_same_output_whatever_the_order() -> None:
    """Deterministic: clients and tasks are sorted first, so input order does not matter."""
    rng = random.Random(7)
    stateful = [TaskId(s, p) for s in range(3) for p in range(4)]
    stateless = [TaskId(5, p) for p in range(3)]
    states = [
        ClientState(f"P{i}", capacity=rng.randint(1, 3),
                    task_lags={x: rng.choice([-2, 0, 50, 5000]) for x in stateful if rng.random() < 0.5},
                    client_tags={"zone": rng.choice("ab")})
        for i in range(6)
    ]
    configs = AssignmentConfigs(acceptable_recovery_lag=100, num_standby_replicas=1,
                                rack_aware_assignment_tags=("zone",))
    first = assign(states, stateful, stateless, configs, 0)
    for _ in range(5):
        rng.shuffle(states)
        rng.shuffle(stateful)
        again = assign(states, list(reversed(stateful)), stateless, configs, 0)
        assert again == first
        assert list(again.clients) == sorted(again.clients)


def test_uuid_process_ids_are_sorted_like_their_values() -> None:
    a, b = uuid.UUID(int=2), uuid.UUID(int=1)
    result = assign([ClientState(a), ClientState(b)], {t("0_0"), t("0_1")}, (), NO_STANDBY)
    assert list(result.clients) == [b, a]
    assert result.active_owner(t("0_0")) == b
    assert result.active_owner(t("9_9")) is None


def test_no_standbys_when_there_is_no_other_client() -> None:
    """KS shouldNotAssignAnyStandbysWithInsufficientCapacity."""
    result = assign([ClientState("P1", task_lags={t("0_0"): 0, t("0_1"): 0})], {t("0_0"), t("0_1")}, (), WITH_STANDBY)
    assert counts(result) == {"P1": (2, 0)}
    assert not result.probing_rebalance_needed


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: assign([], {t("0_0")}), "assign() needs at least one client, got none"),
        (lambda: assign([ClientState("P1"), ClientState("P1")], ()), "duplicate process id P1"),
        (lambda: assign([ClientState("P1"), ClientState(uuid.UUID(int=1))], ()),
         "process ids must be all str or all uuid.UUID (they are sorted), got "
         "['00000000-0000-0000-0000-000000000001', 'P1']"),
        (lambda: assign([ClientState("P1")], {t("0_0")}, {t("0_0")}),
         "tasks cannot be both stateful and stateless: ['0_0']"),
        (lambda: assign([ClientState("P1")], ["0_0"]),
         "stateful_tasks must hold task ids (e.g. TaskId(0, 1)), got the string '0_0'"),
        (lambda: assign([ClientState("P1")], (), "0_0"),
         "stateless_tasks must be a collection of task ids, got '0_0'"),
        (lambda: assign([ClientState("P1")], (), now_ms=-1), "now_ms must be an int >= 0, got -1"),
        (lambda: assign([ClientState("P1")], (), configs={"num_standby_replicas": 1}),
         "configs must be AssignmentConfigs, got dict {'num_standby_replicas': 1}"),
        (lambda: assign({"P1": ClientState("P1")}, ()), "clients must be ClientState objects, got str 'P1'"),
    ],
)
def test_bad_input_names_the_value(call, message: str) -> None:
    with pytest.raises(InvalidAssignmentInputError) as excinfo:
        call()
    assert str(excinfo.value) == message


def test_without_lags_previous_owners_keep_their_tasks_and_probing_follows() -> None:
    """Sticky fallback (end offsets unavailable): reported lags are ignored; previous actives
    stay put although round-robin would move one to the new client, which gets a warmup; a
    follow-up rebalance is always scheduled."""
    tasks = {t("0_0"), t("0_1"), t("0_2")}
    result = assign_without_lags(
        [
            ClientState("P1", previous_active_tasks={t("0_0"), t("0_1")}, task_lags={t("0_0"): 10**9}),
            ClientState("P2", previous_active_tasks={t("0_2")}, previous_standby_tasks={t("0_0")}),
            ClientState("P3"),
        ],
        tasks, (), WITH_STANDBY, now_ms=1_000,
    )
    assert result.clients["P1"].active_tasks == {t("0_0"), t("0_1")}
    assert result.clients["P2"].active_tasks == {t("0_2")}
    assert result.clients["P3"].warmup_tasks  # it is being prepared for its share
    assert result.probing_rebalance_needed and result.next_probing_rebalance_ms == 61_000


def test_without_lags_probing_is_scheduled_even_when_nothing_moves() -> None:
    result = assign_without_lags([ClientState("P1", previous_active_tasks={t("0_0")})], {t("0_0")}, (), NO_STANDBY, 0)
    assert result.clients["P1"].active_tasks == {t("0_0")}
    assert result.probing_rebalance_needed and result.next_probing_rebalance_ms == 60_000


def test_round_robin_target_ignores_previous_ownership_stickiness_comes_from_movements() -> None:
    """docs/semantics.md §3 step (1) says round-robin, and so does Kafka Streams 4.x: its
    assignActiveStatefulTasks is round-robin plus thread balancing, with no regard for who
    owned what (the earlier KIP-441 drafts that started from a state-constrained assignment
    were replaced by this in apache/kafka PR #8588, before 2.6 shipped). Stickiness comes only
    from step (4): a task whose round-robin client is not caught up stays on a caught-up one.

    Consequence pinned here: P1 runs 0_1 and P2 runs 0_0 (already balanced), yet round-robin
    wants them the other way round, so both stay where they are for now, each target client
    warms up the other task, and a probing rebalance follows; once warm, they swap."""
    states = [
        ClientState("P1", previous_active_tasks={t("0_1")}, task_lags={t("0_1"): -2}),
        ClientState("P2", previous_active_tasks={t("0_0")}, task_lags={t("0_0"): -2}),
    ]
    result = assign(states, {t("0_0"), t("0_1")}, (), NO_STANDBY)
    assert result.clients["P1"].active_tasks == {t("0_1")}
    assert result.clients["P2"].active_tasks == {t("0_0")}
    assert result.clients["P1"].warmup_tasks == {t("0_0")}
    assert result.clients["P2"].warmup_tasks == {t("0_1")}
    assert result.probing_rebalance_needed

    warm = [
        ClientState("P1", task_lags={t("0_1"): -2, t("0_0"): 0}),
        ClientState("P2", task_lags={t("0_0"): -2, t("0_1"): 0}),
    ]
    after = assign(warm, {t("0_0"), t("0_1")}, (), NO_STANDBY)
    assert after.clients["P1"].active_tasks == {t("0_0")}
    assert after.clients["P2"].active_tasks == {t("0_1")}
    assert not after.probing_rebalance_needed
