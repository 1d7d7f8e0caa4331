"""Is an application healthy? The verdict ``stateful-streams status --check`` exits with and the
Airflow page shows in its banner, as a pure function of an :class:`ApplicationStatus`.

Unhealthy, each a problem of its own: an instance that stopped publishing (stale) or is
failing or shutting down, a task nobody runs (unassigned, or only claimed by a stale
instance), a task whose state is lost, and, when bounds are given, a standby lagging more
than ``max_standby_lag`` changelog offsets (or with an unknown lag) and a task whose input
lags more than ``max_input_lag`` records. A restoring task is healthy: it is on its way (the
summary says how many restore); a restoration that makes no progress shows as a task that
stays ``restoring``, which the restoration sensor's timeout catches.
"""

from __future__ import annotations

import dataclasses

from airflow_stateful_provider.streams.status.application import ApplicationStatus
from airflow_stateful_provider.streams.status.conditions import UNTRUSTED_INSTANCE_STATES
from airflow_stateful_provider.streams.status.document import STALE, STATE_LOST, UNASSIGNED
from airflow_stateful_provider.streams.status.readable import age_text

__all__ = ["HealthVerdict", "application_health"]


@dataclasses.dataclass(frozen=True)
class HealthVerdict:
    healthy: bool
    #: One line each, most urgent first; empty when healthy.
    problems: tuple[str, ...]
    #: One line: the verdict and the counts behind it.
    summary: str


def application_health(status: ApplicationStatus, *, max_standby_lag: int | None = None,
                       max_input_lag: int | None = None) -> HealthVerdict:
    """The verdict on ``status`` (see the module docstring); a bound of None is not checked."""
    for name, bound in (("max_standby_lag", max_standby_lag), ("max_input_lag", max_input_lag)):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 0):
            raise ValueError(f"{name} must be an int >= 0 or None, got {bound!r}")
    problems: list[str] = []
    lost = [t.task_id for t in status.tasks if t.state == STATE_LOST]
    if lost:
        problems.append(f"state lost: task(s) {', '.join(lost)} (docs/runbook.md, \"A task's state is lost\")")
    for instance in status.instances:
        if instance.stale:
            problems.append(f"instance {instance.instance_id}@{instance.host} is stale: last status "
                            f"{age_text(instance.age_ms)} ago (bound {age_text(status.stale_after_ms)})")
        elif instance.state in UNTRUSTED_INSTANCE_STATES:
            problems.append(f"instance {instance.instance_id}@{instance.host} is {instance.state}")
    for state, why in ((UNASSIGNED, "no instance runs"), (STALE, "only a stale instance claims")):
        tasks = [t.task_id for t in status.tasks if t.state == state]
        if tasks:
            problems.append(f"{why} task(s) {', '.join(tasks)}")
    if not status.instances:
        problems.append("no live instance")
    if max_standby_lag is not None:
        for task in status.tasks:
            for standby in task.standbys:
                if standby.warmup or standby.stale:
                    continue  # a warmup moves the task; a stale standby is reported with its instance
                if standby.lag is None or standby.lag > max_standby_lag:
                    lag = "unknown" if standby.lag is None else f"{standby.lag:,}"
                    problems.append(f"standby of task {task.task_id} on {standby.instance_id} lags {lag} offsets "
                                    f"(bound {max_standby_lag:,})")
    if max_input_lag is not None:
        for task in status.tasks:
            if task.input_lag is not None and task.input_lag > max_input_lag:
                problems.append(f"task {task.task_id} input lags {task.input_lag:,} records (bound {max_input_lag:,})")
    running = sum(t.state == "running" for t in status.tasks)
    restoring = len(status.restoring_tasks)
    counts = (f"{len(status.instances)} instance(s), {len(status.tasks)} task(s): {running} running"
              + (f", {restoring} restoring" if restoring else ""))
    if problems:
        summary = f"UNHEALTHY: application {status.application_id}: {counts}; {len(problems)} problem(s)"
    else:
        summary = f"OK: application {status.application_id}: {counts}"
    return HealthVerdict(not problems, tuple(problems), summary)
