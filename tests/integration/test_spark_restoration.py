"""The Spark application restoring a prepared large state: ``stateful-streams status`` shows
the live roles and progress while it restores, then every task running with caught-up
standbys; SIGTERM to the driver drains it (as a stop command does) and the driver exits 0
with every store checkpointed at its changelog's end."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest

from airflow_stateful_provider import cli
from airflow_stateful_provider.streams.state.common.checkpoint import read_checkpoint
from tools.changelog_state import fill_counts_changelog
from tools.kafka.topics import create_topics
from tools.spark_app import SparkApplication
from tools.waits import wait_progressing

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PARTITIONS = 4
RECORDS = 600_000
#: Size of the changelog's producer batches and of a partition's fetch: a restore applies
#: about a hundred records a fetch, so it lasts seconds and the 300 ms status documents
#: catch it under way (with the default 4 MiB fetches it can be over in half a second).
FETCH_BYTES = 8192


def status_json(bootstrap_servers: str, application_id: str) -> dict | None:
    out = io.StringIO()
    code = cli.main(["status", application_id, "--bootstrap-servers", bootstrap_servers, "--json"], out=out)
    return json.loads(out.getvalue()) if code == 0 else None


def test_status_follows_restoration_on_spark_then_stop_drains(bootstrap_servers, tmp_path):
    app_id = f"spark-restore-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap_servers, {f"{app_id}-in": PARTITIONS, f"{app_id}-out": PARTITIONS})
    ends = fill_counts_changelog(bootstrap_servers, app_id, PARTITIONS, RECORDS, batch_bytes=FETCH_BYTES)
    changelog = f"{app_id}-counts-changelog"
    state_dir = tmp_path / "state"
    config = {"application_id": app_id, "bootstrap_servers": bootstrap_servers, "state_dir": str(state_dir),
              "num_standby_replicas": 1, "commit_interval_ms": 500, "status_interval_ms": 300,
              "consumer_configs": {"session_timeout_ms": 10_000, "max_partition_fetch_bytes": FETCH_BYTES},
              "app_configs": {"input": f"{app_id}-in", "output": f"{app_id}-out"}}
    app = SparkApplication("tests.integration.topologies:configured_counts", config, tmp_path, instances=2).start()
    try:
        snapshots: list[dict] = []

        def restored_and_caught_up() -> bool:
            app.check_running()
            snapshot = status_json(bootstrap_servers, app_id)
            if snapshot is None:
                return False
            snapshots.append(snapshot)
            tasks = snapshot["tasks"]
            return (len(tasks) == PARTITIONS and all(t["state"] == "running" for t in tasks)
                    and all(len(t["standbys"]) == 1 and t["standbys"][0]["lag"] == 0 for t in tasks))

        def changelog_records_applied() -> int:
            """Progress: per task the records restored (all once running) and its standby's position."""
            if not snapshots:
                return 0
            applied = 0
            for task in snapshots[-1]["tasks"]:
                end = ends[int(task["task_id"].split("_")[1])]
                restoration = task.get("restoration")
                if task["state"] == "running":
                    applied += end
                elif restoration is not None and not restoration.get("pending"):
                    applied += restoration["restored"]
                applied += sum(end - s["lag"] for s in task["standbys"] if s.get("lag") is not None)
            return applied

        # nothing shows before spark-submit has started the instances: a longer stall allowed
        waited = wait_progressing(restored_and_caught_up, changelog_records_applied,
                                  "all tasks restored with caught-up standbys",
                                  measure="changelog records restored and applied by standbys", stall=120,
                                  context=app.log_tail, interval=0.1)
        print(f"restored {RECORDS} changelog records (actives and standbys) {waited:.1f}s after spark-submit")

        # While restoring: active owners are the two instances, progress within the changelog.
        restoring = [(s, t) for s in snapshots for t in s["tasks"] if t["state"] == "restoring"]
        assert restoring, "no snapshot caught a task restoring"
        print(f"{len(restoring)} task reports of {len(snapshots)} status reads show a task restoring")
        # Every restoring task carries its progress from the first document that shows it
        # restoring (never pending from this writer): its changelog partition with the end
        # offset captured at restore start, which is the prepared changelog's end. A task
        # that moved while restoring resumes from its checkpoint (or its standby's position),
        # so the run's total is the end minus where this run started.
        for _snapshot, task in restoring:
            progress = task["restoration"]
            partition = int(task["task_id"].split("_")[1])
            assert task["active"]["instance_id"] in {f"{app_id}-0", f"{app_id}-1"}
            assert progress is not None and progress["pending"] is False, task
            [entry] = progress["changelogs"]
            assert (entry["topic"], entry["partition"], entry["end_offset"]) == (changelog, partition, ends[partition])
            assert progress["total"] == ends[partition] - entry["start_offset"], (task, ends)
            assert 0 <= progress["restored"] <= progress["total"]
        assert any(0 < t["restoration"]["restored"] < t["restoration"]["total"] for _, t in restoring)

        final = snapshots[-1]
        assert sorted(i["instance_id"] for i in final["instances"]) == [f"{app_id}-0", f"{app_id}-1"]
        assert all(i["state"] == "RUNNING" and i["epoch"] == 1 and not i["stale"] for i in final["instances"])
        for task in final["tasks"]:
            assert task["standbys"][0]["instance_id"] != task["active"]["instance_id"]

        app.terminate_driver()
        assert app.wait(120) == 0, app.log_tail()
        assert app.events("stop_requested")[0]["reason"] == "SIGTERM"
        finished = app.wait_for_event("supervisor_finished", 5)
        assert finished["exit_code"] == 0 and finished["cancelled"] == []
        assert {e["instance_id"] for e in app.events("instance_stopped")} == {f"{app_id}-0", f"{app_id}-1"}
    finally:
        app.kill()

    # Every task's store, active or standby, was checkpointed at the last changelog record
    # (docs/semantics.md §1: the offset of the last record applied).
    checkpointed: dict[int, list[int]] = {}
    for checkpoint in Path(state_dir).glob(f"*/{app_id}/*/.checkpoint"):
        for (topic, partition), offset in read_checkpoint(checkpoint).items():
            assert topic == changelog
            checkpointed.setdefault(partition, []).append(offset)
    assert {p: sorted(o) for p, o in checkpointed.items()} == {p: [ends[p] - 1, ends[p] - 1] for p in range(PARTITIONS)}
