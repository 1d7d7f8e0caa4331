"""The health verdict of ``stateful-streams status --check``: which states are problems, the
optional bounds, and the one-line summary."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.status.application import build_application_status
from airflow_stateful_provider.streams.status.document import InstanceStatus
from airflow_stateful_provider.streams.status.health import application_health
from tests.unit.streams.status.status_documents import APP, NOW_MS, changelog, document, task

CL = f"{APP}-counts-changelog"


def status(*docs: dict, ends: dict | None = None):
    parsed = [InstanceStatus.from_dict(d, key=d["instance_id"]) for d in docs]
    return build_application_status(parsed, ends or {}, NOW_MS, application_id=APP)


def healthy_pair() -> tuple[dict, dict]:
    """i-1 runs 0_0 and keeps a standby of 0_1; i-2 the other way round; both caught up."""
    return (document("i-1", task("0_0"), task("0_1", "standby", "running", changelog(1, 0, 50, 50))),
            document("i-2", task("0_1"), task("0_0", "standby", "running", changelog(0, 0, 80, 80))))


def test_running_and_restoring_tasks_with_fresh_instances_are_healthy():
    i1, i2 = healthy_pair()
    i2["tasks"][0] = task("0_1", "active", "restoring", changelog(1, 0, 10, 50, rate=5.0))
    verdict = application_health(status(i1, i2))
    assert verdict.healthy and verdict.problems == ()
    assert verdict.summary == f"OK: application {APP}: 2 instance(s), 2 task(s): 1 running, 1 restoring"


def test_stale_and_failing_instances_unassigned_and_lost_tasks_are_problems():
    i1, i2 = healthy_pair()
    stale = document("i-2", task("0_1"), published_at=NOW_MS - 120_000)
    failing = document("i-3", task("0_2"), state="PENDING_ERROR")
    lost = document("i-4", task("0_3", "active", "state_lost"))
    lost["format_version"] = 2
    lost["tasks"][0]["lost_changelogs"] = []
    only_standby = document("i-5", task("0_4", "standby", "running", changelog(4, 0, 1, 1)))
    verdict = application_health(status(i1, stale, failing, lost, only_standby))
    assert not verdict.healthy
    assert verdict.problems == (
        "state lost: task(s) 0_3 (docs/runbook.md, \"A task's state is lost\")",
        "instance i-2@host-i-2 is stale: last status 2m00s ago (bound 30s)",
        "instance i-3@host-i-3 is PENDING_ERROR",
        "no instance runs task(s) 0_4",
        "only a stale instance claims task(s) 0_1",
    )
    assert verdict.summary.startswith(f"UNHEALTHY: application {APP}: 5 instance(s), 5 task(s)")
    assert verdict.summary.endswith("; 5 problem(s)")


def test_bounds_are_checked_only_when_given():
    i1, i2 = healthy_pair()
    i2["tasks"][1] = task("0_0", "standby", "running", changelog(0, 0, 80, 80))
    i1["tasks"][0]["input_partitions"] = [{"topic": "in", "partition": 0, "position": 10, "end_offset": 510}]
    lagging = status(i1, i2, ends={(CL, 0): 1_080})  # the standby of 0_0 is 1,000 behind the live end
    assert application_health(lagging).healthy
    verdict = application_health(lagging, max_standby_lag=999, max_input_lag=499)
    assert verdict.problems == ("standby of task 0_0 on i-2 lags 1,000 offsets (bound 999)",
                                "task 0_0 input lags 500 records (bound 499)")
    assert application_health(lagging, max_standby_lag=1_000, max_input_lag=500).healthy


def test_bad_bounds_are_named():
    with pytest.raises(ValueError, match="max_standby_lag must be an int >= 0 or None, got -1"):
        application_health(status(*healthy_pair()), max_standby_lag=-1)
