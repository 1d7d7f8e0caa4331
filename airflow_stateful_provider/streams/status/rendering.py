"""The status table on-call reads: one row per task, then the instances.

``stateful-streams status`` prints it (with progress bars on a terminal); the sensors use
its cells in their messages. Pure text from an :class:`ApplicationStatus`.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_stateful_provider.streams.status.application import (
    ApplicationStatus,
    RestorationProgress,
    StandbyReplica,
)
from airflow_stateful_provider.streams.status.maintenance_view import last_maintenance
from airflow_stateful_provider.streams.status.readable import age_text, duration_text, rate_text

__all__ = ["BAR_WIDTH", "columns", "progress_bar", "render_status_table", "restoration_cells"]


#: Width of the restoration progress bar between its brackets.
BAR_WIDTH = 20


def progress_bar(fraction: float | None, width: int = BAR_WIDTH) -> str:
    """``[#########...........]``; a pending restoration (fraction None) shows ``[  pending  ]``."""
    if fraction is None:
        return "[" + "pending".center(width) + "]"
    filled = min(width, max(0, int(fraction * width)))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def restoration_cells(restoration: RestorationProgress | None, *, bar: bool = False) -> tuple[str, str, str]:
    """(RESTORED/TOTAL, RATE, ETA) cells of a task's restoration; "-" when there is none.
    With ``bar`` the first cell leads with a progress bar (terminals)."""
    if restoration is None:
        return "-", "-", "-"
    r = restoration
    fraction = r.fraction
    if r.pending or fraction is None:  # the same: a pending restoration has no total
        progress = f"{r.restored:,}/? (pending)"
        eta = "?"
    else:
        progress = f"{r.restored:,}/{r.total:,} ({int(fraction * 100)}%)"
        eta = "?" if r.eta_seconds is None else duration_text(r.eta_seconds)
    if bar:
        progress = f"{progress_bar(r.fraction)} {progress}"
    return progress, rate_text(r.rate), eta


def _standby_text(replica: StandbyReplica) -> str:
    lag = "?" if replica.lag is None else f"{replica.lag:,}"
    flags = ("warmup " if replica.warmup else "") + ("STALE " if replica.stale else "")
    return f"{flags}{replica.instance_id}@{replica.host} ({lag})"


def render_status_table(status: ApplicationStatus, *, bars: bool = False) -> str:
    """A fixed-width table for on-call, one row per task, then the instances. ``bars`` draws
    each restoration as a progress bar (for a terminal)."""
    header = ("TASK", "ACTIVE", "STATE", "RESTORED/TOTAL", "RATE", "ETA", "STANDBYS (LAG)", "NOTES")
    rows = []
    for task in status.tasks:
        active = "-" if task.active is None else f"{task.active.instance_id}@{task.active.host}"
        progress, rate, eta = restoration_cells(task.restoration, bar=bars)
        standbys = ", ".join(_standby_text(s) for s in task.standbys) or "-"
        rows.append((task.task_id, active, task.state, progress, rate, eta, standbys, "; ".join(task.notes)))
    stale = status.stale_instances
    lost = status.state_lost_tasks
    lines = [f"application {status.application_id}: {len(status.instances)} instance(s)"
             f"{f' ({len(stale)} stale)' if stale else ''}, {len(status.tasks)} task(s) "
             f"({len(status.restoring_tasks)} restoring, {len(status.unassigned_tasks)} unassigned"
             f"{f', {len(lost)} STATE LOST' if lost else ''}); stale after {age_text(status.stale_after_ms)}"]
    lines += columns(header, rows)
    lines.append("")
    inst_header = ("INSTANCE", "HOST", "PID", "EPOCH", "STATE", "GUARANTEE", "GENERATION", "PUBLISHED",
                   "TASKS (A/S/W)")
    inst_rows = [(i.instance_id, i.host, str(i.pid), str(i.epoch), i.state, i.processing_guarantee,
                  "-" if i.generation is None else str(i.generation),
                  f"{age_text(i.age_ms)} ago" + (" STALE" if i.stale else ""),
                  f"{len(i.active_tasks)}/{len(i.standby_tasks)}/{len(i.warmup_tasks)}")
                 for i in status.instances]
    lines += columns(inst_header, inst_rows)
    waiting = [(i, t) for i in status.instances if not i.stale for t in i.threads if t.blocked_in is not None]
    if waiting:
        lines.append("")
        lines.append("THREADS WAITING ON KAFKA:")
        for i, t in waiting:
            lines.append(f"  {t.thread_id} ({i.instance_id}@{i.host}): {age_text((t.blocked_ms or 0) + i.age_ms)} in "
                         f"{t.blocked_in}, waiting for {t.blocked_on}")
    maintained = last_maintenance(status.instances)
    if maintained:
        lines.append("")
        lines.append("LAST MAINTENANCE (per store copy, from the instances' answers to control commands):")
        lines += columns(("STORE", "TASK", "INSTANCE", "ROLE", "RUN", "WHEN", "RESULT"),
                         [(m.store, m.task_id, m.instance_id, m.role, m.what,
                           f"{age_text(max(0, status.now_ms - m.at))} ago", m.summary) for m in maintained])
    if stale:
        lines.append("")
        lines.append(f"STALE INSTANCES (no document for more than {age_text(status.stale_after_ms)}; "
                     f"their tasks are not trusted):")
        for i in stale:
            lines.append(f"  {i.instance_id}@{i.host} pid {i.pid} epoch {i.epoch} state {i.state}, "
                         f"last published {age_text(i.age_ms)} ago")
    return "\n".join(lines)


def columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = []
    for row in [header, *rows]:
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return out
