"""docs/semantics.md §3, literally: every lag example and every assignor scenario.

All scenarios use capacity 1 and process ids P1 < P2 < P3. Config A = acceptable lag 100,
2 warmups, 0 standbys; B = A + 1 standby. MAX = no state (no lag entry). Each expected
result was checked against Kafka Streams' HighAvailabilityTaskAssignor (and its
HighAvailabilityTaskAssignorTest, which has the same scenarios); they agree, and where a
scenario's one-line result leaves something open the docstring says what KS does.
"""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.assignment.assignment_configs import AssignmentConfigs
from airflow_stateful_provider.streams.assignment.client_state import ClientState
from airflow_stateful_provider.streams.assignment.lag import compute_lag
from airflow_stateful_provider.streams.assignment.task_assignor import ClientAssignment, assign
from airflow_stateful_provider.streams.task_id import TaskId

CONFIG_A = AssignmentConfigs(
    acceptable_recovery_lag=100, max_warmup_replicas=2, num_standby_replicas=0,
    probing_rebalance_interval_ms=60_000,
)
CONFIG_B = AssignmentConfigs(
    acceptable_recovery_lag=100, max_warmup_replicas=2, num_standby_replicas=1,
    probing_rebalance_interval_ms=60_000,
)
NOW = 1_000_000


def t(text: str) -> TaskId:
    return TaskId.parse(text)


def tasks(*texts: str) -> frozenset[TaskId]:
    return frozenset(t(x) for x in texts)


def owned(active: tuple[str, ...] = (), standby: tuple[str, ...] = (),
          warmup: tuple[str, ...] = ()) -> ClientAssignment:
    return ClientAssignment(tasks(*active), tasks(*standby), tasks(*warmup))


@pytest.mark.parametrize(
    ("reported", "expected"),
    [(-2, -2), (None, 100), (90, 10), (150, 100)],
    ids=["latest", "absent", "behind", "beyond-end"],
)
def test_lag_examples_with_end_sum_100(reported: int | None, expected: int) -> None:
    assert compute_lag(reported, 100) == expected


def test_active_moves_to_caught_up_client_and_previous_owner_warms_up() -> None:
    """Config A: stateful {0_0}, stateless {0_1}. P1 was active on 0_0 but lags 500; P2 ran 0_1
    and has lag 0 on 0_0 -> P1 active {0_1} + standby {0_0}; P2 active {0_0}; probing.

    The round-robin puts 0_0 on P1, which is not caught up while P2 is: 0_0 goes to P2 and P1
    keeps a warmup; the stateless 0_1 then goes to P1, the client with fewer actives."""
    result = assign(
        [
            ClientState("P1", previous_active_tasks=tasks("0_0"), task_lags={t("0_0"): 500}),
            ClientState("P2", previous_active_tasks=tasks("0_1"), task_lags={t("0_0"): 0}),
        ],
        tasks("0_0"), tasks("0_1"), CONFIG_A, NOW,
    )
    assert dict(result.clients) == {
        "P1": owned(active=("0_1",), standby=("0_0",), warmup=("0_0",)),
        "P2": owned(active=("0_0",)),
    }
    assert result.probing_rebalance_needed is True
    assert result.next_probing_rebalance_ms == NOW + 60_000


def test_no_client_caught_up_active_goes_to_most_caught_up() -> None:
    """Config B: task 0_0; lags P1 MAX, P2 1000, P3 500 -> P3 active; P1 and P2 standbys; probing.

    As in Kafka Streams: round-robin gives 0_0 to P1 and its standby to P2 (least loaded);
    nobody is within 100, so the active goes to the most caught-up client P3 and P1 keeps a
    warmup; P2's standby stays (the only more caught-up client, P3, holds the task already).
    So P1's standby is the warmup and P2's is the hot standby."""
    result = assign(
        [
            ClientState("P1"),
            ClientState("P2", task_lags={t("0_0"): 1000}),
            ClientState("P3", task_lags={t("0_0"): 500}),
        ],
        tasks("0_0"), (), CONFIG_B, NOW,
    )
    assert dict(result.clients) == {
        "P1": owned(standby=("0_0",), warmup=("0_0",)),
        "P2": owned(standby=("0_0",)),
        "P3": owned(active=("0_0",)),
    }
    assert result.probing_rebalance_needed is True


def test_new_client_gets_one_warmup_while_caught_up_client_keeps_both_actives() -> None:
    """Config A: tasks {0_0, 0_1}; P1 lag 0 on both (previous active), P2 MAX -> P1 both
    actives, P2 one standby (warmup); probing.

    Round-robin wants 0_1 on P2; P2 is not caught up, so P1 keeps 0_1 and P2 warms it up."""
    result = assign(
        [
            ClientState("P1", previous_active_tasks=tasks("0_0", "0_1"),
                        task_lags={t("0_0"): 0, t("0_1"): 0}),
            ClientState("P2"),
        ],
        tasks("0_0", "0_1"), (), CONFIG_A, NOW,
    )
    assert dict(result.clients) == {
        "P1": owned(active=("0_0", "0_1")),
        "P2": owned(standby=("0_1",), warmup=("0_1",)),
    }
    assert result.probing_rebalance_needed is True


def _four_tasks_one_caught_up_client() -> ClientState:
    return ClientState(
        "P1", previous_active_tasks=tasks("0_0", "0_1", "0_2", "0_3"),
        task_lags={t(x): 0 for x in ("0_0", "0_1", "0_2", "0_3")},
    )


def test_warmups_are_limited_by_max_warmup_replicas() -> None:
    """Tasks 0_0..0_3, P1 lag 0 on all, P2 MAX, 1 warmup, 0 standbys -> P1 four actives,
    P2 exactly one standby; probing.

    Round-robin wants 0_1 and 0_3 on P2; both move to P1; the single warmup goes to the
    first movement in task order (0_1)."""
    configs = AssignmentConfigs(acceptable_recovery_lag=100, max_warmup_replicas=1,
                                num_standby_replicas=0, probing_rebalance_interval_ms=60_000)
    result = assign([_four_tasks_one_caught_up_client(), ClientState("P2")],
                    tasks("0_0", "0_1", "0_2", "0_3"), (), configs, NOW)
    assert dict(result.clients) == {
        "P1": owned(active=("0_0", "0_1", "0_2", "0_3")),
        "P2": owned(standby=("0_1",), warmup=("0_1",)),
    }
    assert result.probing_rebalance_needed is True


def test_with_one_standby_the_new_client_holds_standbys_for_all_four() -> None:
    """Same with 1 standby instead: P2 holds standbys for all four; probing.

    Standby placement puts 0_0 and 0_2's standbys on P2 and 0_1 and 0_3's on P1; the actives
    of 0_1 and 0_3 then swap with P1's caught-up standbys (a swap costs no warmup). None of
    P2's four standbys is a warmup: they are the configured replicas, just not caught up yet
    (P1, the only caught-up client, holds the actives, so they have nowhere better to go)."""
    configs = AssignmentConfigs(acceptable_recovery_lag=100, max_warmup_replicas=1,
                                num_standby_replicas=1, probing_rebalance_interval_ms=60_000)
    result = assign([_four_tasks_one_caught_up_client(), ClientState("P2")],
                    tasks("0_0", "0_1", "0_2", "0_3"), (), configs, NOW)
    assert dict(result.clients) == {
        "P1": owned(active=("0_0", "0_1", "0_2", "0_3")),
        "P2": owned(standby=("0_0", "0_1", "0_2", "0_3")),
    }
    assert result.probing_rebalance_needed is True
    assert result.active_task_movements == 2
    assert result.standby_task_movements == 0


def test_caught_up_balanced_assignment_is_kept_without_probing() -> None:
    """Config A, four tasks: P1 caught up on {0_0, 0_2}, P2 on {0_1, 0_3}, others MAX ->
    actives unchanged; probing: no (round-robin already yields exactly this)."""
    result = assign(
        [
            ClientState("P1", previous_active_tasks=tasks("0_0", "0_2"),
                        task_lags={t("0_0"): 0, t("0_2"): 0}),
            ClientState("P2", previous_active_tasks=tasks("0_1", "0_3"),
                        task_lags={t("0_1"): 0, t("0_3"): 0}),
        ],
        tasks("0_0", "0_1", "0_2", "0_3"), (), CONFIG_A, NOW,
    )
    assert dict(result.clients) == {
        "P1": owned(active=("0_0", "0_2")),
        "P2": owned(active=("0_1", "0_3")),
    }
    assert result.probing_rebalance_needed is False
    assert result.next_probing_rebalance_ms is None


def test_single_client_gets_all_actives_and_no_standbys() -> None:
    """Config B, one client, two caught-up tasks -> two actives, no standbys (no other client
    to hold them); probing: no."""
    result = assign(
        [ClientState("P1", previous_active_tasks=tasks("0_0", "0_1"),
                     task_lags={t("0_0"): 0, t("0_1"): 0})],
        tasks("0_0", "0_1"), (), CONFIG_B, NOW,
    )
    assert dict(result.clients) == {"P1": owned(active=("0_0", "0_1"))}
    assert result.probing_rebalance_needed is False
    assert result.next_probing_rebalance_ms is None
