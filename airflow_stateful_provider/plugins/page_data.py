"""What the "Stateful streams" page shows of an application, as plain JSON: the page's script
only lays it out, so what a cell says is decided (and tested) here.

Per application: the health verdict (the one ``stateful-streams status --check`` gives),
its instances (epoch, host, state, age of their last status), its tasks (active, standby and
warmup owners, restoration progress with rate, ETA and source, standby lag against the bound,
input lag, processing rate, dropped records, the newest snapshot), the control commands
its instances acknowledged, newest first, and the last retention and compaction of every
store copy (status/maintenance_view.py).
"""

from __future__ import annotations

from typing import Any

from airflow_stateful_provider.streams.status.application import ApplicationStatus, TaskStatus
from airflow_stateful_provider.streams.status.health import application_health
from airflow_stateful_provider.streams.status.maintenance_view import last_maintenance
from airflow_stateful_provider.streams.status.readable import age_text, duration_text, rate_text

__all__ = ["MAX_COMMANDS", "application_data", "unreadable_application_data"]

#: Control commands shown per application.
MAX_COMMANDS = 20


def application_data(conn_id: str, status: ApplicationStatus, *, max_standby_lag: int) -> dict[str, Any]:
    """The page's data of one application whose status was read."""
    verdict = application_health(status, max_standby_lag=max_standby_lag)
    now = status.now_ms
    spark = next((i.host_application for i in status.instances if i.host_application is not None), None)
    if status.instances:
        health = {"healthy": verdict.healthy, "stopped": False, "summary": verdict.summary,
                  "problems": list(verdict.problems)}
    else:  # every instance left cleanly (tombstoned its document): stopped on purpose, not failing
        health = {"healthy": False, "stopped": True, "summary": "STOPPED: no live instance (every instance left "
                                                                "cleanly)", "problems": []}
    return {
        "conn_id": conn_id,
        "application_id": status.application_id,
        "error": None,
        "health": health,
        "spark": None if spark is None else {"application_id": spark.application_id, "ui_url": spark.ui_url},
        "instances": [{
            "instance_id": i.instance_id, "host": i.host, "pid": i.pid, "epoch": i.epoch, "state": i.state,
            "guarantee": i.processing_guarantee, "stale": i.stale, "age_ms": i.age_ms,
            "age": f"{age_text(i.age_ms)} ago", "tasks": f"{len(i.active_tasks)}/{len(i.standby_tasks)}/"
                                                       f"{len(i.warmup_tasks)}",
            "process_rate": rate_text(sum(t.process_rate for t in i.threads)) if i.threads else "-",
            "records_lag_max": max((t.records_lag_max for t in i.threads if t.records_lag_max is not None),
                                   default=None),
            "metrics_endpoint": i.metrics_endpoint,
        } for i in status.instances],
        "tasks": [_task(task, now, max_standby_lag) for task in status.tasks],
        "commands": sorted(({"command_id": a.command_id, "instance_id": i.instance_id, "status": a.status,
                             "at": a.at, "age": f"{age_text(max(0, now - a.at))} ago",
                             "result": a.result} for i in status.instances for a in i.acknowledgements),
                           key=lambda c: (-c["at"], c["instance_id"]))[:MAX_COMMANDS],
        "maintenance": [{"store": m.store, "task_id": m.task_id, "instance_id": m.instance_id, "role": m.role,
                         "run": m.what, "at": m.at, "age": f"{age_text(max(0, now - m.at))} ago",
                         "summary": m.summary} for m in last_maintenance(status.instances)],
    }


def unreadable_application_data(conn_id: str, application_id: str, error: str) -> dict[str, Any]:
    """An application (or a whole connection, ``application_id`` "") that could not be read."""
    return {"conn_id": conn_id, "application_id": application_id, "error": error,
            "health": {"healthy": False, "stopped": False, "summary": f"UNREADABLE: {error}", "problems": [error]},
            "spark": None, "instances": [], "tasks": [], "commands": [], "maintenance": []}


def _task(task: TaskStatus, now_ms: int, max_standby_lag: int) -> dict[str, Any]:
    r = task.restoration
    restoration = None
    if r is not None:
        restoration = {
            "pending": r.pending, "fraction": r.fraction, "restored": r.restored, "total": r.total,
            "remaining": r.remaining, "rate": rate_text(r.rate),
            "eta": "?" if r.eta_seconds is None else duration_text(r.eta_seconds),
            "text": f"{r.restored:,}/? (pending)" if r.pending else
                    f"{r.restored:,}/{r.total:,} ({int((r.fraction or 0) * 100)}%)",
        }
    restore = task.restore
    snapshot = task.newest_snapshot
    return {
        "task_id": task.task_id,
        "state": task.state,
        "active": None if task.active is None else {"instance_id": task.active.instance_id, "host": task.active.host,
                                                    "stale": task.active.stale},
        "restoration": restoration,
        "source": None if restore is None else restore.source,
        "standbys": [{
            "instance_id": s.instance_id, "role": "warmup" if s.warmup else "standby", "lag": s.lag,
            "lag_text": "?" if s.lag is None else f"{s.lag:,}", "stale": s.stale,
            "within_bound": s.lag is not None and s.lag <= max_standby_lag and not s.stale,
            "update_rate": rate_text(s.update_rate),
        } for s in task.standbys],
        "input_lag": task.input_lag,
        "process_rate": None if task.process_rate is None else rate_text(task.process_rate),
        "dropped_records": sum(task.dropped_records.values()),
        "snapshot": None if snapshot is None else {
            "snapshot_id": snapshot.snapshot_id, "age": f"{age_text(max(0, now_ms - snapshot.taken_at))} ago"},
        "notes": list(task.notes),
    }
