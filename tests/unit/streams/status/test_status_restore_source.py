"""The optional ``tasks[].restore`` field of status documents: where a task's state came
from (local / snapshot / changelog), parsed strictly, absent in older documents, carried
into the application status, its notes and ``--json``."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.errors import StatusFormatError
from airflow_stateful_provider.streams.status.application import build_application_status
from airflow_stateful_provider.streams.status.document import InstanceStatus
from airflow_stateful_provider.streams.status.document_parts import ChangelogProgress, InstanceTask, TaskRestore
from airflow_stateful_provider.streams.status.rendering import render_status_table

NOW = 1_700_000_000_000
CL = "app-counts-changelog"


def document(restore: TaskRestore | None, state: str = "restoring") -> InstanceStatus:
    changelogs = (ChangelogProgress(CL, 0, "counts", 4_000_000, 4_000_500, 4_001_000, 100.0),) \
        if state == "restoring" else ()
    return InstanceStatus(instance_id="i-1", application_id="app", state="REBALANCING", epoch=1, host="h", pid=1,
                          process_id="p", published_at=NOW - 1_000, generation=3, next_probing_rebalance_ms=None,
                          tasks=(InstanceTask("0_0", "active", state, changelogs, restore),), acknowledgements=())


SNAPSHOT = TaskRestore("snapshot", 500, "1699999280000-abcdef01", NOW - 720_000, 4_000_000,
                       ("1699999900000-12345678: file counts/rocksdb/000009.sst is missing",))


def test_restore_round_trips_and_older_documents_have_none():
    parsed = InstanceStatus.from_dict(document(SNAPSHOT).to_dict(), key="i-1")
    assert parsed.tasks[0].restore == SNAPSHOT
    old = document(None).to_dict()
    assert "restore" not in old["tasks"][0]
    assert InstanceStatus.from_dict(old, key="i-1").tasks[0].restore is None


@pytest.mark.parametrize("field, value, message", [
    ("source", "disk", "must be one of ['changelog', 'local', 'snapshot'], got 'disk'"),
    ("changelog_records", -1, "must be an int >= 0, got -1"),
    ("snapshot_id", 5, "must be a non-empty string or null, got 5"),
    ("skipped", [1], "must be a list of strings"),
])
def test_a_malformed_restore_names_the_field(field, value, message):
    raw = document(SNAPSHOT).to_dict()
    raw["tasks"][0]["restore"][field] = value
    with pytest.raises(StatusFormatError) as raised:
        InstanceStatus.from_dict(raw, key="i-1")
    assert str(raised.value).endswith(f"field 'tasks[0].restore.{field}' {message}")


def test_application_status_shows_the_source_age_and_records():
    status = build_application_status([document(SNAPSHOT)], {}, NOW, 30_000)
    task = status.task("0_0")
    assert task.restore == SNAPSHOT
    assert "from snapshot 1699999280000-abcdef01 (taken 12m00s ago, 4,000,000 offsets) + changelog 500" in task.notes
    assert any(n.startswith("1 snapshot(s) skipped: 1699999900000-12345678") for n in task.notes)
    assert status.to_json_dict()["tasks"][0]["restore"]["source"] == "snapshot"
    assert "from snapshot 1699999280000-abcdef01" in render_status_table(status)

    running = build_application_status([document(TaskRestore("changelog", 42), state="running")], {}, NOW, 30_000)
    assert running.task("0_0").restore.changelog_records == 42
    assert running.task("0_0").notes == ()  # nothing to say about a running task restored without skips


def test_the_restoration_sensor_says_where_the_state_comes_from():
    from airflow_stateful_provider.streams.status.conditions import restoration_condition

    result = restoration_condition(build_application_status([document(SNAPSHOT)], {}, NOW, 30_000))
    check = result.stuck[0]
    assert check.cells[6] == "snapshot (12m00s old)"
    assert check.waiting_for.startswith("restoring: 500 offsets remaining (> 0), ETA 5s; from snapshot "
                                        "1699999280000-abcdef01 (taken 12m00s ago, 4,000,000 offsets)")
