"""Standby placement: least loaded by default; spread over tag values with rack_aware_assignment_tags."""

from __future__ import annotations

import random

import pytest

from airflow_stateful_provider.streams.assignment.assignment_configs import AssignmentConfigs
from airflow_stateful_provider.streams.assignment.client_state import AssignedClient, ClientState
from airflow_stateful_provider.streams.assignment.standby_placement import (
    assign_standby_tasks,
    is_allowed_standby_movement,
)
from airflow_stateful_provider.streams.assignment.task_assignor import AssignmentResult, assign
from airflow_stateful_provider.streams.task_id import TaskId
from tests.unit.streams.assignment.simulation import assert_valid, round_bound, run_until_stable


def t(text: str) -> TaskId:
    return TaskId.parse(text)


def placed(clients: dict[str, AssignedClient], actives: dict[str, list[str]]) -> dict[str, AssignedClient]:
    for pid, tasks in actives.items():
        for task in tasks:
            clients[pid].assign_active(t(task))
    return clients


def holders(result_or_clients, task: TaskId) -> set[str]:
    if isinstance(result_or_clients, AssignmentResult):
        return {pid for pid, a in result_or_clients.clients.items()
                if task in a.active_tasks or task in a.standby_tasks}
    return {pid for pid, c in result_or_clients.items() if c.has_assigned_task(task)}


def grid_clients() -> dict[str, AssignedClient]:
    """Kafka Streams' zone x cluster grid: P1..P9, zone z1..z3 within cluster c1..c3."""
    clients = {}
    for i in range(9):
        pid = f"P{i + 1}"
        tags = {"zone": f"z{i % 3 + 1}", "cluster": f"c{i // 3 + 1}"}
        clients[pid] = AssignedClient(ClientState(pid, capacity=2, client_tags=tags))
    return clients


def test_standbys_spread_over_zones_and_clusters_when_actives_share_a_zone() -> None:
    """Kafka Streams' shouldDistributeStandbyTasksWhenActiveTasksAreLocatedOnSameZone: actives
    on P1, P4, P7 (all zone z1, clusters c1..c3), two standbys each. Every task ends on three
    distinct zones and three distinct clusters, with one of the standby pairs KS accepts.

    KS's unit test feeds the tasks in HashSet order and so also gets two standbys per client;
    its HighAvailabilityTaskAssignor feeds them sorted, as we do, which yields the (equally
    isolated, less even) distribution pinned below."""
    clients = placed(grid_clients(), {"P1": ["0_0", "1_0"], "P4": ["0_1", "1_1"], "P7": ["0_2", "1_2"]})
    tasks = sorted(t(x) for x in ("0_0", "0_1", "0_2", "1_0", "1_1", "1_2"))
    assign_standby_tasks(clients, tasks, 2, ("zone", "cluster"))

    accepted = {
        "0_0": [{"P9", "P5"}, {"P6", "P8"}], "1_0": [{"P9", "P5"}, {"P6", "P8"}],
        "0_1": [{"P2", "P9"}, {"P3", "P8"}], "1_1": [{"P2", "P9"}, {"P3", "P8"}],
        "0_2": [{"P5", "P3"}, {"P2", "P6"}], "1_2": [{"P5", "P3"}, {"P2", "P6"}],
    }
    for task, options in accepted.items():
        standby_holders = {pid for pid, c in clients.items() if c.has_standby_task(t(task))}
        assert standby_holders in options, (task, standby_holders)
        copies = holders(clients, t(task))
        assert len({clients[p].client_tags["zone"] for p in copies}) == 3
        assert len({clients[p].client_tags["cluster"] for p in copies}) == 3
    counts = {pid: len(c.standby_tasks) for pid, c in clients.items()}
    assert counts == {"P1": 0, "P2": 2, "P3": 2, "P4": 0, "P5": 3, "P6": 1, "P7": 0, "P8": 1, "P9": 3}


def test_a_tag_key_stops_constraining_when_its_values_are_used_up() -> None:
    """Two zones, two standbys: the first standby goes to the other zone; then both zone values
    hold a copy, so the second standby may go anywhere not holding the task (least loaded)."""
    clients = {
        pid: AssignedClient(ClientState(pid, client_tags={"zone": zone}))
        for pid, zone in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b"))
    }
    placed(clients, {"a1": ["0_0"], "a2": ["0_1"]})
    assign_standby_tasks(clients, [t("0_0"), t("0_1")], 2, ("zone",))
    for task, active in (("0_0", "a1"), ("0_1", "a2")):
        copies = holders(clients, t(task))
        assert active in copies and len(copies) == 3
        assert {clients[p].client_tags["zone"] for p in copies} == {"a", "b"}
    # 0_0 takes b1 (zone b), then, zone no longer constraining, the least loaded b2; 0_1 takes
    # b1 (zone b, b1 before b2 at equal load), then a1 (a1 before b2 at equal load).
    assert clients["b1"].standby_tasks == {t("0_0"), t("0_1")}
    assert clients["b2"].standby_tasks == {t("0_0")}
    assert clients["a1"].standby_tasks == {t("0_1")}


def test_a_single_tag_value_never_constrains() -> None:
    """All clients in one zone: its only value is used by the active's client already, so the
    key does not constrain and standbys go to the least-loaded clients (greedily: p1 ends with
    two); assign() then balances them over threads."""
    clients = {pid: AssignedClient(ClientState(pid, client_tags={"zone": "a"})) for pid in ("p1", "p2", "p3")}
    placed(clients, {"p1": ["0_0"], "p2": ["0_1"], "p3": ["0_2"]})
    assign_standby_tasks(clients, [t("0_0"), t("0_1"), t("0_2")], 1, ("zone",))
    assert {pid: sorted(map(str, c.standby_tasks)) for pid, c in clients.items()} == {
        "p1": ["0_1", "0_2"], "p2": ["0_0"], "p3": [],
    }

    configs = AssignmentConfigs(num_standby_replicas=1, rack_aware_assignment_tags=("zone",))
    result = assign([ClientState(p, client_tags={"zone": "a"}) for p in ("p1", "p2", "p3")],
                    [t("0_0"), t("0_1"), t("0_2")], (), configs)
    assert [len(a.standby_tasks) for a in result.clients.values()] == [1, 1, 1]
    for task in ("0_0", "0_1", "0_2"):
        assert len(holders(result, t(task))) == 2


def test_no_client_differing_in_every_tag_falls_back_to_least_loaded(caplog: pytest.LogCaptureFixture) -> None:
    """Active on p1 (a, x): p2 shares the zone, p3 the cluster, so no client is on unused
    values of both keys; the standby still gets placed, on the least-loaded client, with a
    warning (Kafka Streams: best effort, then assignPendingStandbyTasksToLeastLoadedClients)."""
    tags = {"p1": ("a", "x"), "p2": ("a", "y"), "p3": ("b", "x")}
    clients = {
        pid: AssignedClient(ClientState(pid, client_tags={"zone": z, "cluster": c}))
        for pid, (z, c) in tags.items()
    }
    placed(clients, {"p1": ["0_0"], "p3": ["0_1"]})
    assign_standby_tasks(clients, [t("0_0")], 1, ("zone", "cluster"))
    assert clients["p2"].standby_tasks == {t("0_0")}
    assert ("Rack-aware standby placement over tags ['zone', 'cluster'] could not place all standbys of ['0_0']"
            in caplog.text)


def test_tags_outside_the_configured_keys_do_not_constrain_placement() -> None:
    """Only `zone` is configured; every client shares host tag "h", which must not matter."""
    clients = {
        pid: AssignedClient(ClientState(pid, client_tags={"zone": zone, "host": "h"}))
        for pid, zone in (("p1", "a"), ("p2", "a"), ("p3", "b"))
    }
    placed(clients, {"p1": ["0_0"]})
    assign_standby_tasks(clients, [t("0_0")], 1, ("zone",))
    assert clients["p3"].standby_tasks == {t("0_0")}  # p2 is less loaded-or-equal but same zone


def test_rack_aware_assign_keeps_standbys_out_of_the_active_zone() -> None:
    """Through assign(): two zones of two clients, four new tasks, one standby. The default
    placement would put 0_0's standby on P2 (least loaded, same zone as P1); with tags every
    task's copies are in both zones."""
    zones = {"P1": "a", "P2": "a", "P3": "b", "P4": "b"}
    tasks = [t(x) for x in ("0_0", "0_1", "0_2", "0_3")]

    def run(tags: tuple[str, ...]) -> AssignmentResult:
        configs = AssignmentConfigs(num_standby_replicas=1, rack_aware_assignment_tags=tags)
        return assign([ClientState(p, client_tags={"zone": z}) for p, z in zones.items()], tasks, (), configs)

    default = run(())
    assert {zones[p] for p in holders(default, t("0_0"))} == {"a"}
    aware = run(("zone",))
    for task in tasks:
        assert {zones[p] for p in holders(aware, task)} == {"a", "b"}
    assert not aware.probing_rebalance_needed


def test_standby_balancing_moves_only_between_clients_with_identical_tags() -> None:
    """Kafka Streams' isAllowedTaskMovement(source, destination): all client tags must match,
    including tags that are not configured keys."""
    def client(pid: str, **tags: str) -> AssignedClient:
        return AssignedClient(ClientState(pid, client_tags=tags))

    zone_a = client("p1", zone="a", cluster="x")
    assert is_allowed_standby_movement(zone_a, client("p2", zone="a", cluster="x", extra="1"), ("zone",))
    assert not is_allowed_standby_movement(zone_a, client("p3", zone="b", cluster="x"), ("zone",))
    assert not is_allowed_standby_movement(zone_a, client("p4", zone="a", cluster="y"), ("zone",))
    assert is_allowed_standby_movement(zone_a, client("p5", zone="b"), ())


@pytest.mark.parametrize("seed", range(25))
def test_settled_assignment_isolates_copies_by_zone_when_zones_suffice(seed: int) -> None:
    """With one tag key and at least as many zone values as copies per task, the settled
    assignment (no movements left) has every task's copies in distinct zones."""
    rng = random.Random(seed)
    num_zones = rng.randint(2, 4)
    states = [
        ClientState(f"client-{i:02d}", capacity=rng.randint(1, 3), client_tags={"zone": f"z{rng.randrange(num_zones)}"})
        for i in range(rng.randint(2, 9))
    ]
    used_zones = {s.client_tags["zone"] for s in states}
    standbys = rng.randint(1, 2)
    configs = AssignmentConfigs(acceptable_recovery_lag=100, max_warmup_replicas=2,
                                num_standby_replicas=standbys, rack_aware_assignment_tags=("zone",))
    stateful = frozenset(TaskId(i // 4, i % 4) for i in range(rng.randint(1, 16)))
    for state in list(states):
        if rng.random() < 0.5:  # some clients already hold state, so movements happen first
            lags = {task: rng.choice([-2, 0, 5000]) for task in stateful if rng.random() < 0.5}
            states[states.index(state)] = ClientState(
                state.process_id, capacity=state.capacity, client_tags=state.client_tags, task_lags=lags)
    outcome = run_until_stable(states, stateful, frozenset(), configs,
                               max_rounds=round_bound(len(stateful), len(states), configs))
    assert_valid(outcome.result, stateful, frozenset(), standbys)
    zone_of = {s.process_id: s.client_tags["zone"] for s in states}
    copies = min(len(states), 1 + standbys)
    for task in stateful:
        task_zones = [zone_of[p] for p in holders(outcome.result, task)]
        if len(used_zones) >= copies:
            assert len(set(task_zones)) == copies, (task, task_zones)
