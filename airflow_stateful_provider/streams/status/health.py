"""Is an application healthy? The verdict ``stateful-streams status --check`` exits with and the
Airflow page shows in its banner, as a pure function of an :class:`ApplicationStatus`.

Unhealthy, each a problem of its own: an instance that stopped publishing (stale) or is
failing or shutting down, a task nobody runs (unassigned, or only claimed by a stale
instance), a task whose state is lost, and, when bounds are given, a standby lagging more
than ``max_standby_lag`` changelog offsets (or with an unknown lag) and a task whose input
lags more than ``max_input_lag`` records. A stream thread blocked in one Kafka call, or
processing nothing while its input waits, for STALLED_AFTER_MS is unhealthy too: with a
document every 10 s, on-call sees it within a minute. A restoring task is healthy: it is on its way (the
summary says how many restore); a restoration that makes no progress shows as a task that
stays ``restoring``, which the restoration sensor's timeout catches.
"""

from __future__ import annotations

import dataclasses

from airflow_stateful_provider.streams.status.application import ApplicationStatus, InstanceSummary
from airflow_stateful_provider.streams.status.conditions import UNTRUSTED_INSTANCE_STATES
from airflow_stateful_provider.streams.status.document import STALE, STATE_LOST, UNASSIGNED
from airflow_stateful_provider.streams.status.readable import age_text

__all__ = ["STALLED_AFTER_MS", "HealthVerdict", "application_health"]

#: A thread blocked in one Kafka call, or processing nothing while its input waits, for this
#: long (as of now: the document's figure plus its age) is reported.
STALLED_AFTER_MS = 30_000


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
        else:
            problems.extend(_stalled_threads(instance))
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


def _stalled_threads(instance: InstanceSummary) -> list[str]:
    """A problem line per thread of ``instance`` blocked in a Kafka call, or processing
    nothing while its input waits, for STALLED_AFTER_MS or more."""
    problems = []
    for thread in instance.threads:
        if thread.blocked_ms is not None and thread.blocked_ms + instance.age_ms >= STALLED_AFTER_MS:
            problems.append(f"thread {thread.thread_id} of instance {instance.instance_id}@{instance.host} has waited "
                            f"{age_text(thread.blocked_ms + instance.age_ms)} in {thread.blocked_in} for "
                            f"{thread.blocked_on} (docs/failure-handling.md, \"A stalled thread\")")
        elif (thread.unprocessed_ms is not None and instance.state == "RUNNING"
              and thread.unprocessed_ms + instance.age_ms >= STALLED_AFTER_MS):
            problems.append(f"thread {thread.thread_id} of instance {instance.instance_id}@{instance.host} has "
                            f"processed nothing for {age_text(thread.unprocessed_ms + instance.age_ms)} while its "
                            f"input waits ({thread.records_lag_max:,} records)")
    return problems
