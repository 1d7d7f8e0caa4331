"""The last maintenance per store copy, read back from the instances' answers to control
commands (status/maintenance_view.py), as ``stateful-streams status`` and the Airflow page
show it."""

from __future__ import annotations

from airflow_stateful_provider.plugins.page_data import application_data
from airflow_stateful_provider.streams.status.maintenance_view import last_maintenance
from airflow_stateful_provider.streams.status.rendering import render_status_table
from tests.unit.streams.status.status_documents import NOW_MS, document, snapshot, task

DAY = 86_400_000


def retention(now_ms, rows_dropped, *, ttl=False):
    return {"now_ms": now_ms, "observed_stream_time_before": now_ms - 3 * DAY, "observed_stream_time_after": now_ms,
            "min_live_segment": None if ttl else 7, "segments_dropped": [] if ttl else [{"segment_id": 3}],
            "bytes_before": 4096, "bytes_after": 1024, "rows_dropped": rows_dropped, "cutoff_ms": now_ms,
            "changelog_records_written": 1}


def answered(command_id, at, *rows, status="done"):
    return {"command_id": command_id, "status": status, "at": at, "result": {"stores": list(rows)}}


def row(store, task_id, role, result):
    return {"store": store, "task_id": task_id, "role": role, "result": result}


def maintained_status():
    a = document("a", task("0_0"))
    a["acknowledgements"] = [
        answered("enforce_retention-1", NOW_MS - 2 * DAY,
                 row("sessions", "0_0", "active", retention(NOW_MS - 2 * DAY, 5))),
        answered("enforce_retention-2", NOW_MS - 60_000,
                 row("sessions", "0_0", "active", retention(NOW_MS - 60_000, 9)),
                 row("profiles", "0_0", "active", retention(NOW_MS - 60_000, 4, ttl=True))),
        answered("compact-1", NOW_MS - 30_000, row("sessions", "0_0", "active",
                                                   {"bytes_before": 2048, "bytes_after": 512, "duration_s": 0.1})),
        answered("enforce_retention-3", NOW_MS - 10_000, row("sessions", "0_0", "active", retention(NOW_MS, 1)),
                 status="failed"),
        {"command_id": "checkpoint-1", "status": "done", "at": NOW_MS, "result": {"tasks": ["0_0"]}},
    ]
    return snapshot(a)


def test_the_newest_done_run_per_store_copy_and_kind():
    seen = last_maintenance(maintained_status().instances)
    assert [(m.store, m.what, m.at) for m in seen] == [
        ("profiles", "retention", NOW_MS - 60_000),
        ("sessions", "compaction", NOW_MS - 30_000),
        ("sessions", "retention", NOW_MS - 60_000),  # the failed run later is not a run
    ]
    assert seen[0].summary.startswith("as of ") and "expired 4 key(s)" in seen[0].summary
    assert seen[1].summary == "2.0 KiB -> 512 B"
    assert "dropped 1 segment(s), 9 row(s); 4.0 KiB -> 1.0 KiB" in seen[2].summary
    assert "1 changelog record(s) written" in seen[2].summary


def test_status_and_the_page_show_it():
    status = maintained_status()
    text = render_status_table(status)
    assert "LAST MAINTENANCE" in text
    line = next(line for line in text.splitlines() if line.startswith("sessions") and "retention" in line)
    assert line.split()[:6] == ["sessions", "0_0", "a", "active", "retention", "1m00s"]
    data = application_data("kafka", status, max_standby_lag=1_000)
    assert [(m["store"], m["run"], m["age"]) for m in data["maintenance"]] == [
        ("profiles", "retention", "1m00s ago"), ("sessions", "compaction", "30s ago"),
        ("sessions", "retention", "1m00s ago")]


def test_nothing_to_show_without_maintenance():
    status = snapshot(document("a", task("0_0")))
    assert last_maintenance(status.instances) == []
    assert "LAST MAINTENANCE" not in render_status_table(status)
