"""``state_lost`` tasks in the status document (format version 2): written only when a task
is state-lost, parsed strictly, reported by a thread that died of it, and shown by the
application status, the on-call table and ``--json`` even after the instance went stale."""

from __future__ import annotations

import json
import threading
import uuid
from types import SimpleNamespace

import pytest

from airflow_stateful_provider.streams.errors import StatusFormatError
from airflow_stateful_provider.streams.restoration.changelog_loss import LostChangelog
from airflow_stateful_provider.streams.status.application import build_application_status
from airflow_stateful_provider.streams.status.collector import status_document_from_instance
from airflow_stateful_provider.streams.status.conditions import restoration_condition
from airflow_stateful_provider.streams.status.document import InstanceStatus
from airflow_stateful_provider.streams.status.document_parts import InstanceTask, LostChangelogReport
from airflow_stateful_provider.streams.status.rendering import render_status_table
from airflow_stateful_provider.streams.task_id import TaskId
from tests.unit.streams.status.status_documents import fake_thread_metrics

NOW = 1_700_000_000_000
CL = "app-counts-changelog"
LOST = LostChangelogReport(CL, 0, "counts", 49, 0, 0)


def document(*tasks: InstanceTask, published_at: int = NOW - 1_000, instance_id: str = "i-1",
             state: str = "ERROR") -> InstanceStatus:
    return InstanceStatus(instance_id=instance_id, application_id="app", state=state, epoch=1, host="h", pid=1,
                          process_id="p", published_at=published_at, tasks=tasks)


def test_a_state_lost_task_round_trips_in_a_version_2_document_and_others_stay_version_1():
    lost = document(InstanceTask("0_0", "active", "state_lost", lost_changelogs=(LOST,)),
                    InstanceTask("0_1", "active", "running"))
    raw = json.loads(lost.to_json_bytes())
    assert raw["format_version"] == 2
    assert raw["tasks"][0]["lost_changelogs"] == [
        {"topic": CL, "partition": 0, "store": "counts", "checkpointed_offset": 49, "log_start_offset": 0,
         "log_end_offset": 0}]
    assert "lost_changelogs" not in raw["tasks"][1]
    assert InstanceStatus.from_json_bytes(lost.to_json_bytes(), key="i-1") == lost
    assert json.loads(document(InstanceTask("0_1", "active", "running")).to_json_bytes())["format_version"] == 1


def test_state_lost_needs_version_2_and_lost_changelogs_are_parsed_strictly():
    raw = document(InstanceTask("0_0", "active", "state_lost", lost_changelogs=(LOST,))).to_dict()
    raw["format_version"] = 1
    with pytest.raises(StatusFormatError, match=r"field 'tasks\[0\].state' is 'state_lost', which format_version 1 "
                                                r"does not have \(it came with version 2\)"):
        InstanceStatus.from_dict(raw, key="i-1")
    raw["format_version"] = 2
    raw["tasks"][0]["lost_changelogs"][0]["log_end_offset"] = -1
    with pytest.raises(StatusFormatError, match=r"field 'tasks\[0\].lost_changelogs\[0\].log_end_offset' must be "
                                                r"an int >= 0, got -1"):
        InstanceStatus.from_dict(raw, key="i-1")


def test_a_thread_that_died_of_a_lost_changelog_still_reports_the_task():
    lost = LostChangelog("0_0", "active", "counts", CL, 0, 49, 0, 0, "/state/app/0_0")
    standby = LostChangelog("0_2", "standby", "counts", CL, 2, 7, 3, 5, "/state/app/0_2")
    reader = SimpleNamespace(progress=lambda: [], restore_sources={},
                             lost_tasks={TaskId(0, 0): (lost,), TaskId(0, 2): (standby,)})
    dead = SimpleNamespace(tasks={}, standby_tasks={}, changelog_reader=reader, consumer=None,
                           tasks_lock=threading.RLock(), next_probing_rebalance_ms=None, name="app-StreamThread-1",
                           metrics=fake_thread_metrics(), snapshot_taker=None,
                           kafka_waits=SimpleNamespace(current=None))
    streams = SimpleNamespace(state=SimpleNamespace(value="ERROR"), process_id=uuid.uuid4(), threads=[dead],
                              metrics_endpoint=None,
                              config=SimpleNamespace(application_id="app", processing_guarantee="at_least_once",
                                                     host_application=None))
    raw = status_document_from_instance(streams, "i-1", 1, now_ms=NOW, host="h", pid=1)
    parsed = InstanceStatus.from_dict(raw, key="i-1")
    assert raw["format_version"] == 2
    assert [(t.task_id, t.role, t.state, t.lost_changelogs) for t in parsed.tasks] == [
        ("0_0", "active", "state_lost", (LOST,)),
        ("0_2", "standby", "state_lost", (LostChangelogReport(CL, 2, "counts", 7, 3, 5),))]


def test_the_application_status_keeps_a_lost_task_lost_when_its_reporter_went_stale():
    stale = document(InstanceTask("0_0", "active", "state_lost", lost_changelogs=(LOST,)), published_at=NOW - 600_000)
    status = build_application_status([stale], {}, NOW, 30_000)
    task = status.task("0_0")
    assert task.state == "state_lost" and task.active.stale
    assert [t.task_id for t in status.state_lost_tasks] == ["0_0"]
    assert status.to_json_dict()["state_lost_tasks"] == ["0_0"]
    lost_note = ("STATE LOST on i-1 (active): store 'counts' holds app-counts-changelog-0 up to offset 49, the "
                 "changelog now starts at 0 and ends at 0; see docs/runbook.md")
    assert lost_note in task.notes
    table = render_status_table(status)
    assert "(0 restoring, 0 unassigned, 1 STATE LOST)" in table.splitlines()[0]
    assert "state_lost" in table and lost_note in table


def test_a_live_owner_wins_but_the_loss_it_replaced_stays_in_the_notes():
    lost = document(InstanceTask("0_0", "active", "state_lost", lost_changelogs=(LOST,)))
    running = document(InstanceTask("0_0", "active", "running"), instance_id="i-2", state="RUNNING")
    task = build_application_status([lost, running], {}, NOW, 30_000).task("0_0")
    assert task.state == "running" and task.active.instance_id == "i-2"
    assert any(note.startswith("STATE LOST on i-1 (active)") for note in task.notes), task.notes


def test_the_restoration_sensor_says_the_state_is_lost():
    stale = document(InstanceTask("0_0", "active", "state_lost", lost_changelogs=(LOST,)), published_at=NOW - 600_000)
    result = restoration_condition(build_application_status([stale], {}, NOW, 30_000))
    assert not result.done
    assert result.checks[0].waiting_for.startswith("state lost: its changelog no longer holds what its stores held")
