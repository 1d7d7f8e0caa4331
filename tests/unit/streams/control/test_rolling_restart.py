"""The two checks of a rolling restart (streams/control/rolling_restart.py) on status snapshots:
when an instance may stop, and when it is back."""

from __future__ import annotations

from unittest import mock

import pytest

from airflow_stateful_provider.streams.control.commands import new_command
from airflow_stateful_provider.streams.control.rolling_restart import (
    back_after_restart,
    ready_to_stop,
    rolling_restart,
)
from airflow_stateful_provider.streams.errors import RollingRestartError, UnknownApplicationError
from tests.unit.streams.status.status_documents import APP, NOW_MS, changelog, document, snapshot, task

CL = f"{APP}-counts-changelog"
ENDS = {(CL, 0): 1_000, (CL, 1): 2_000}


def standby(task_id: str, current: int, partition: int, role: str = "standby") -> dict:
    return task(task_id, role, "running", changelog(partition, 0, current, None))


def two_instances(standby_of_0_0: int = 1_000, standby_of_0_1: int = 2_000, **second) -> list[dict]:
    return [document("i-1", task("0_0"), standby("0_1", standby_of_0_1, 1)),
            document("i-2", task("0_1"), standby("0_0", standby_of_0_0, 0), **second)]


def test_an_instance_may_stop_once_each_of_its_active_tasks_has_a_standby_within_the_bound():
    status = snapshot(*two_instances(standby_of_0_0=900), ends=ENDS)
    assert ready_to_stop(status, "i-1", 100) == ""
    waiting = ready_to_stop(status, "i-1", 99)
    assert "0_0" in waiting and "standby i-2 lags 100 > 99" in waiting
    assert ready_to_stop(status, "i-2", 0) == "", "0_1's standby on i-1 is at the end"


def test_a_stale_standby_or_a_warmup_does_not_make_an_instance_ready():
    stale = snapshot(*two_instances(published_at=NOW_MS - 45_000), ends=ENDS)
    assert "standby i-2 is stale" in ready_to_stop(stale, "i-1", 10_000)
    warmup = snapshot(document("i-1", task("0_0"), standby("0_1", 2_000, 1)),
                      document("i-2", task("0_1"), standby("0_0", 1_000, 0, role="warmup")), ends=ENDS)
    assert "0 of 1 standby(s)" in ready_to_stop(warmup, "i-1", 10_000)


def test_an_instance_stale_or_unknown_is_never_ready():
    status = snapshot(document("i-1", task("0_0"), published_at=NOW_MS - 45_000),
                      document("i-2", standby("0_0", 1_000, 0)), ends=ENDS)
    assert "i-1 is stale" in ready_to_stop(status, "i-1", 10_000)
    assert ready_to_stop(status, "i-9", 10_000) == "i-9 publishes no status document"


def test_tasks_of_a_subtopology_without_any_changelog_need_no_standby():
    status = snapshot(document("i-1", task("1_0")), document("i-2", task("1_1")), ends=ENDS)
    assert ready_to_stop(status, "i-1", 0) == ""


def restarted(epoch: int, *acks: tuple[str, str], state: str = "RUNNING", tasks: tuple[dict, ...] = ()) -> dict:
    doc = document("i-1", *(tasks or (task("0_0"),)), state=state)
    doc["epoch"] = epoch
    doc["acknowledgements"] = [{"command_id": c, "status": s, "result": None, "at": NOW_MS} for c, s in acks]
    return doc


def test_back_needs_a_newer_epoch_running_the_answer_done_and_a_settled_group():
    command = new_command(APP, "restart", instances=["i-1"], command_id="r-1")
    other = document("i-2", task("0_1"))
    assert "newer than epoch 1" in back_after_restart(snapshot(other), command, "i-1", 1)
    old = restarted(1, ("r-1", "accepted"), state="PENDING_SHUTDOWN")
    assert "newer than epoch 1" in back_after_restart(snapshot(old, other), command, "i-1", 1)
    rebalancing = restarted(2, state="REBALANCING")
    assert back_after_restart(snapshot(rebalancing, other), command, "i-1", 1) == "epoch 2 of i-1 is REBALANCING"
    unanswered = restarted(2)
    assert "has not answered r-1" in back_after_restart(snapshot(unanswered, other), command, "i-1", 1)
    restoring = restarted(2, ("r-1", "done"), tasks=(task("0_0", "active", "restoring", changelog(0, 0, 5, 9)),))
    assert "task 0_0 is restoring" in back_after_restart(snapshot(restoring, other), command, "i-1", 1)
    moving = restarted(2, ("r-1", "done"))
    assert "i-2 is REBALANCING" in back_after_restart(
        snapshot(moving, document("i-2", task("0_1"), state="REBALANCING")), command, "i-1", 1)
    assert back_after_restart(snapshot(moving, other), command, "i-1", 1) == ""


def test_an_instance_answering_failed_stops_the_rolling_restart():
    command = new_command(APP, "restart", instances=["i-1"], command_id="r-1")
    status = snapshot(restarted(1, ("r-1", "accepted"), ("r-1", "failed")))
    with pytest.raises(RollingRestartError, match="i-1 answered the restart r-1 failed"):
        back_after_restart(status, command, "i-1", 1)


def test_nothing_is_sent_when_no_instance_or_a_named_one_is_not_live():
    module = "airflow_stateful_provider.streams.control.rolling_restart"
    stale = snapshot(document("i-1", task("0_0"), published_at=NOW_MS - 45_000))
    with mock.patch(f"{module}.fetch_application_status", return_value=stale), \
            mock.patch(f"{module}.send_command") as send:
        with pytest.raises(UnknownApplicationError, match="has no live instance"):
            rolling_restart("b:9092", APP)
        with pytest.raises(UnknownApplicationError, match=r"no live instance \['i-9'\].*live: \[\]"):
            rolling_restart("b:9092", APP, instances=["i-9"])
    send.assert_not_called()
