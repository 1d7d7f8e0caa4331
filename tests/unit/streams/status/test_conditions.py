"""The sensors' conditions on snapshots built from status documents: restoration complete
and standby lag within bounds, with staleness never trusted and no vacuous success."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.status.conditions import (
    normalize_task_ids,
    restoration_condition,
    standby_lag_condition,
    stateful_task_ids,
)
from tests.unit.streams.status.status_documents import NOW_MS, changelog, document, snapshot, task

CL = "clicks-counts-changelog"


def restoring(task_id: str, partition: int, current: int, end: int, rate: float = 100.0) -> dict:
    return task(task_id, "active", "restoring", changelog(partition, 0, current, end, rate))


# ---------------------------------------------------------------------------- restoration


def test_all_running_is_complete():
    result = restoration_condition(snapshot(document("i-1", task("0_0"), task("0_1"))))
    assert result.done
    assert "2/2 task(s) done" in result.summary and not result.stuck


def test_restoring_task_blocks_until_within_max_remaining():
    status = snapshot(document("i-1", task("0_0"), restoring("0_1", 1, 4_000, 10_000, rate=1_200.0)))
    result = restoration_condition(status)
    assert not result.done
    (stuck,) = result.stuck
    assert stuck.task_id == "0_1"
    assert "6,000 offsets remaining (> 0), ETA 5s" in stuck.waiting_for
    table = result.table()
    assert "4,000/10,000 (40%)" in table and "1,200/s" in table and "5s" in table
    assert restoration_condition(status, max_remaining_records=6_000).done
    assert not restoration_condition(status, max_remaining_records=5_999).done


def test_restoring_with_no_rate_has_unknown_eta():
    result = restoration_condition(snapshot(document("i-1", restoring("0_0", 0, 10, 100, rate=0.0))))
    assert "ETA unknown (no progress)" in result.stuck[0].waiting_for


def test_stale_owner_is_never_trusted_even_when_it_said_running():
    status = snapshot(document("i-1", task("0_0"), published_at=NOW_MS - 60_000), document("i-2", task("0_1")))
    result = restoration_condition(status)
    assert not result.done
    (stuck,) = result.stuck
    assert stuck.task_id == "0_0"
    assert "owner i-1 is stale (last published 1m00s ago, reported running): not trusted" == stuck.waiting_for
    assert any("stale instance(s)" in p and "i-1@host-i-1" in p for p in result.problems)


def test_owner_instance_shutting_down_is_not_done():
    result = restoration_condition(snapshot(document("i-1", task("0_0"), state="PENDING_SHUTDOWN")))
    assert not result.done and result.stuck[0].waiting_for == "owner instance i-1 is PENDING_SHUTDOWN"


def test_an_instance_still_joining_the_group_keeps_both_conditions_waiting():
    # The group's first assignment gave every task to i-1; i-2 has published but not joined
    # yet (no generation): its join starts a rebalance that may move any task to it.
    tasks = (task("0_0", "active", "running"), task("0_1", "active", "running"))
    standbys = (task("0_0", "standby", "running", changelog(0, 0, 5, 5)),
                task("0_1", "standby", "running", changelog(1, 0, 5, 5)))
    joining = document("i-2", *standbys, state="REBALANCING", generation=None)
    for result in (restoration_condition(snapshot(document("i-1", *tasks), joining)),
                   standby_lag_condition(snapshot(document("i-1", *tasks), joining), max_lag_records=0)):
        assert not result.done and not result.stuck, result.table()
        assert result.problems == ("the assignment is not settled: not in the group yet: i-2@host-i-2 "
                                   "(REBALANCING) (the rebalance a join starts may move any task)",)
        assert result.summary.endswith("; waiting for the assignment to settle")
    # Joined (same generation as i-1): both hold.
    joined = document("i-2", *standbys, generation=3)
    assert restoration_condition(snapshot(document("i-1", *tasks), joined)).done
    assert standby_lag_condition(snapshot(document("i-1", *tasks), joined), max_lag_records=0).done


def test_instances_at_different_generations_are_in_a_rebalance():
    status = snapshot(document("i-1", task("0_0"), generation=4), document("i-2", task("0_1"), generation=3))
    result = restoration_condition(status)
    assert not result.done
    assert result.problems == ("the assignment is not settled: a rebalance is under way (group generations "
                               "i-1 4, i-2 3)",)


def test_a_failed_or_stale_instance_does_not_hold_the_assignment_open():
    # Their own tasks are judged by the owner checks; without tasks they do not block.
    failed = document("i-2", state="ERROR", generation=None)
    stale = document("i-3", published_at=NOW_MS - 60_000, generation=1)
    result = restoration_condition(snapshot(document("i-1", task("0_0"), task("0_1")), failed, stale))
    assert not any("not settled" in p for p in result.problems), result.problems
    assert result.done, result.table()


def test_unassigned_task_blocks():
    # 0_1 is known only from a standby: nobody runs it as active.
    status = snapshot(document("i-1", task("0_0"), task("0_1", "standby", "running", changelog(1, 0, 5, 5))))
    result = restoration_condition(status)
    assert [c.task_id for c in result.stuck] == ["0_1"]
    assert "unassigned" in result.stuck[0].waiting_for


def test_created_or_suspended_owner_is_not_done():
    result = restoration_condition(snapshot(document("i-1", task("0_0", "active", "created"))))
    assert result.stuck[0].waiting_for == "owner reports the task created"


def test_pending_restoration_is_not_done_whatever_the_bound():
    # restoring without reported end offsets: its size is unknown, so no bound can be met
    status = snapshot(document("i-1", task("0_0", "active", "restoring")))
    for bound in (0, 10**12):
        result = restoration_condition(status, max_remaining_records=bound)
        assert not result.done
        assert result.stuck[0].waiting_for == "restoring; waiting for the owner to report its changelog end offsets"
    assert result.stuck[0].cells[3:] == ("0/? (pending)", "0.0/s", "?", "-")  # "-": no restore source reported


def test_subset_ignores_other_tasks_and_names_missing_ones():
    status = snapshot(document("i-1", task("0_0"), restoring("0_1", 1, 0, 10)), expected_tasks=("1_0",))
    assert restoration_condition(status, task_ids=["0_0"]).done
    assert restoration_condition(status, task_ids="0_0, 0_0").done
    result = restoration_condition(status, task_ids=["0_0", "1_0"])
    assert [c.task_id for c in result.stuck] == ["1_0"]
    # a task the snapshot does not know at all (no expected_tasks passed)
    result = restoration_condition(snapshot(document("i-1", task("0_0"))), task_ids=["2_0"])
    assert not result.done and result.stuck[0].waiting_for == "no instance reports this task"


def test_no_task_at_all_is_not_complete():
    result = restoration_condition(snapshot(document("i-1")))
    assert not result.done and "no task reported yet" in result.table()


def test_table_of_stuck_tasks_leaves_done_ones_out():
    result = restoration_condition(snapshot(document("i-1", task("0_0"), restoring("0_1", 1, 1, 10))))
    rows = result.table(stuck_only=True).splitlines()
    assert rows[1].split()[:2] == ["TASK", "STATE"]
    assert [r.split()[0] for r in rows[2:]] == ["0_1"]
    assert "0_0" in result.table()


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_max_remaining_records_is_checked(bad):
    with pytest.raises(ValueError, match="max_remaining_records must be an int >= 0"):
        restoration_condition(snapshot(document("i-1", task("0_0"))), max_remaining_records=bad)


def test_task_ids_are_validated_and_normalized():
    assert normalize_task_ids(None) is None
    assert normalize_task_ids("0_1,1_0") == ("0_1", "1_0")
    with pytest.raises(ValueError, match="'zero' is not a task id"):
        normalize_task_ids(["0_1", "zero"])
    with pytest.raises(ValueError, match="at least one task"):
        normalize_task_ids([])


# ---------------------------------------------------------------------------- standby lag


def standby(task_id: str, instance_current: int, partition: int, role: str = "standby") -> dict:
    return task(task_id, role, "running", changelog(partition, 0, instance_current, None))


ENDS = {(CL, 0): 1_000, (CL, 1): 2_000}


def test_standbys_within_lag_are_ok():
    status = snapshot(document("i-1", task("0_0"), standby("0_1", 1_990, 1)),
                      document("i-2", task("0_1"), standby("0_0", 900, 0)), ends=ENDS)
    assert stateful_task_ids(status) == ("0_0", "0_1")
    result = standby_lag_condition(status, max_lag_records=100)
    assert result.done, result.table()
    assert "i-2@host-i-2 (100)" in result.table()
    result = standby_lag_condition(status, max_lag_records=99)
    assert [c.task_id for c in result.stuck] == ["0_0"]
    assert "standby i-2 lags 100 > 99" in result.stuck[0].waiting_for


def test_missing_standby_for_a_task_of_a_stateful_subtopology_blocks():
    # 0_1 has no standby; it is stateful because 0_0 (same subtopology) has one.
    status = snapshot(document("i-1", task("0_0"), task("0_1")), document("i-2", standby("0_0", 1_000, 0)),
                      ends=ENDS)
    result = standby_lag_condition(status, max_lag_records=0)
    assert [c.task_id for c in result.stuck] == ["0_1"]
    assert result.stuck[0].waiting_for == "0 of 1 standby(s) within 0 offsets"


def test_stale_standby_and_warmup_do_not_count():
    status = snapshot(document("i-1", task("0_0")),
                      document("i-2", standby("0_0", 1_000, 0), published_at=NOW_MS - 45_000),
                      document("i-3", standby("0_0", 1_000, 0, role="warmup")), ends=ENDS)
    result = standby_lag_condition(status, max_lag_records=10)
    assert not result.done
    waiting = result.stuck[0].waiting_for
    assert "standby i-2 is stale: not trusted" in waiting
    assert "warmup i-3 not counted" in waiting


def test_min_standbys_per_task():
    status = snapshot(document("i-1", task("0_0")), document("i-2", standby("0_0", 1_000, 0)),
                      document("i-3", standby("0_0", 995, 0)), ends=ENDS)
    assert standby_lag_condition(status, max_lag_records=5, min_standbys_per_task=2).done
    result = standby_lag_condition(status, max_lag_records=4, min_standbys_per_task=2)
    assert not result.done and "1 of 2 standby(s) within 4 offsets" in result.stuck[0].waiting_for


def test_unknown_lag_is_not_ok():
    # The standby reports no position for partition 1 of the changelog the restoring active has.
    status = snapshot(document("i-1", task("0_0", "active", "restoring", changelog(0, 0, 5, 10),
                                           changelog(0, 0, 5, 10, topic="clicks-other-changelog"))),
                      document("i-2", standby("0_0", 1_000, 0)), ends=ENDS)
    result = standby_lag_condition(status, max_lag_records=1_000_000)
    assert not result.done and "lag unknown" in result.stuck[0].waiting_for


def test_no_evidence_of_state_is_not_ok_unless_tasks_are_named():
    status = snapshot(document("i-1", task("0_0"), task("0_1")), ends=ENDS)
    result = standby_lag_condition(status, max_lag_records=10)
    assert not result.done and "pass task_ids" in result.table()
    result = standby_lag_condition(status, max_lag_records=10, task_ids=["0_1"])
    assert not result.done and [c.task_id for c in result.stuck] == ["0_1"]


def test_stateless_subtopology_is_not_required_to_have_standbys():
    status = snapshot(document("i-1", task("0_0"), task("1_0")), document("i-2", standby("0_0", 1_000, 0)),
                      ends=ENDS)
    assert stateful_task_ids(status) == ("0_0",)
    assert standby_lag_condition(status, max_lag_records=0).done


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_lag_records": -1}, "max_lag_records must be an int >= 0"),
    ({"max_lag_records": 1, "min_standbys_per_task": 0}, "min_standbys_per_task must be an int >= 1"),
])
def test_standby_parameters_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        standby_lag_condition(snapshot(document("i-1", task("0_0"))), **kwargs)
