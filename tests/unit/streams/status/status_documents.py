"""Status documents and snapshots for the Airflow tests (the format of docs/status-topic.md)."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

from airflow_stateful_provider.streams.status.application import ApplicationStatus, build_application_status
from airflow_stateful_provider.streams.status.document import InstanceStatus

NOW_MS = 1_700_000_000_000
APP = "clicks"


def changelog(partition: int, start: int, current: int, end: int | None, rate: float = 0.0,
              topic: str = f"{APP}-counts-changelog") -> dict:
    return {"topic": topic, "partition": partition, "store": "counts", "start_offset": start,
            "current_offset": current, "end_offset": end, "restore_rate": rate}


def task(task_id: str, role: str = "active", state: str = "running", *changelogs: dict) -> dict:
    return {"task_id": task_id, "role": role, "state": state, "changelogs": list(changelogs)}


def document(instance_id: str, *tasks: dict, app: str = APP, published_at: int = NOW_MS - 1_000,
             state: str = "RUNNING", generation: int | None = 3) -> dict:
    return {"format_version": 1, "instance_id": instance_id, "application_id": app, "state": state, "epoch": 1,
            "host": f"host-{instance_id}", "pid": 100, "process_id": f"uuid-{instance_id}", "generation": generation,
            "next_probing_rebalance_ms": None, "published_at": published_at, "tasks": list(tasks),
            "acknowledgements": []}


def snapshot(*documents: dict, ends: Mapping[tuple[str, int], int] | None = None, now_ms: int = NOW_MS,
             stale_after_ms: int = 30_000, expected_tasks: tuple[str, ...] = (), app: str = APP) -> ApplicationStatus:
    parsed = [InstanceStatus.from_dict(d, key=d["instance_id"]) for d in documents]
    return build_application_status(parsed, ends or {}, now_ms, stale_after_ms, application_id=app,
                                     expected_tasks=expected_tasks)


def fake_thread_metrics() -> SimpleNamespace:
    """A StreamThread's metrics as status/instance_view.py's ThreadMetricsView describes them: nothing yet."""
    empty = SimpleNamespace(avg_max=lambda: (None, None))
    return SimpleNamespace(process_total=0, commit_total=0, transaction_aborts_total=0, commit_latency=empty,
                           poll_records=empty, processed_at=None)
