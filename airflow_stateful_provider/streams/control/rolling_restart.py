"""Restart an application's instances one at a time, each task served throughout.

For each live instance in turn (``stateful-streams restart --rolling``, the
RollingRestartOperator; docs/rolling-restart.md):

1. wait until every stateful active task of the instance has a standby on another instance,
   not stale, within ``max_lag_records`` changelog offsets of the live end (the standby-lag
   sensor's condition, :func:`~airflow_stateful_provider.streams.status.conditions.standby_lag_condition`);
2. send it a ``restart`` command: it closes (commit, checkpoint, leave the group) and its
   host starts the next incarnation with epoch + 1 on the same state directory;
3. wait until the new incarnation is RUNNING (every task it owns restored) and answered the
   command ``done``, and the group has settled (every instance RUNNING, every task running on
   an owner); only then the next instance.

Every wait is bounded by ``step_timeout_ms``; a step that does not finish raises
:class:`RollingRestartError` naming the instance, what was missing, and the instances
already restarted (the rest are untouched: run the command again once fixed).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.control.channel import live_instances, send_command
from airflow_stateful_provider.streams.control.commands import ACK_DONE, ACK_FAILED, ControlCommand, new_command
from airflow_stateful_provider.streams.durations import duration_arg_ms
from airflow_stateful_provider.streams.errors import RollingRestartError, UnknownApplicationError
from airflow_stateful_provider.streams.status.application import ApplicationStatus
from airflow_stateful_provider.streams.status.conditions import (
    TRANSIENT_STATUS_ERRORS,
    checked_bound,
    standby_lag_condition,
    stateful_task_ids,
)
from airflow_stateful_provider.streams.status.document import DEFAULT_STALE_AFTER_MS
from airflow_stateful_provider.streams.status.reader import fetch_application_status

__all__ = ["InstanceRestart", "RollingRestartReport", "back_after_restart", "ready_to_stop", "rolling_restart"]

#: Kafka Streams' default acceptable.recovery.lag: a standby this close counts as caught up.
DEFAULT_MAX_LAG_RECORDS = 10_000


@dataclasses.dataclass(frozen=True)
class InstanceRestart:
    """One instance's restart: its epochs, the active tasks it had, and how long each wait took."""

    instance_id: str
    old_epoch: int
    new_epoch: int
    active_tasks: tuple[str, ...]
    #: Waiting for caught-up standbys before the restart was sent.
    standby_wait_s: float
    #: From sending the restart to the new incarnation RUNNING with its tasks restored.
    restart_s: float


@dataclasses.dataclass(frozen=True)
class RollingRestartReport:
    application_id: str
    max_lag_records: int
    restarts: tuple[InstanceRestart, ...]
    seconds: float

    def text(self) -> str:
        lines = [f"rolling restart of {self.application_id}: {len(self.restarts)} instance(s) restarted in "
                 f"{self.seconds:.1f}s"]
        lines += [f"  {r.instance_id}: epoch {r.old_epoch} -> {r.new_epoch}, waited {r.standby_wait_s:.1f}s for "
                  f"standbys, back in {r.restart_s:.1f}s" for r in self.restarts]
        return "\n".join(lines)

    def to_json_dict(self) -> dict[str, Any]:
        return {"application_id": self.application_id, "max_lag_records": self.max_lag_records,
                "seconds": round(self.seconds, 3),
                "restarts": [dataclasses.asdict(r) | {"active_tasks": list(r.active_tasks)} for r in self.restarts]}


def ready_to_stop(status: ApplicationStatus, instance_id: str, max_lag_records: int) -> str:
    """What stopping ``instance_id`` still waits for ("" when ready): each of its stateful
    active tasks needs a standby elsewhere, not stale, within ``max_lag_records`` offsets.
    Which tasks are stateful is read from the status (stateful_task_ids): a task of a
    subtopology where nothing reports a changelog needs no standby."""
    summary = next((i for i in status.instances if i.instance_id == instance_id), None)
    if summary is None:
        return f"{instance_id} publishes no status document"
    if summary.stale:
        return f"{instance_id} is stale (no status document for {summary.age_ms / 1000:.0f}s): not trusted"
    stateful = set(stateful_task_ids(status))
    tasks = [t for t in summary.active_tasks if t in stateful]
    if not tasks:
        return ""
    result = standby_lag_condition(status, max_lag_records=max_lag_records, min_standbys_per_task=1, task_ids=tasks)
    return "" if result.done else result.table(stuck_only=True)


def back_after_restart(status: ApplicationStatus, command: ControlCommand, instance_id: str, old_epoch: int) -> str:
    """What the restarted ``instance_id`` still waits for ("" when back): a document of a newer
    epoch, not stale, RUNNING, the command answered ``done``; and the group settled after its
    return: every instance RUNNING (no rebalance or restoration under way) and every task running
    on an owner. Raises RollingRestartError when it answered ``failed``."""
    summary = next((i for i in status.instances if i.instance_id == instance_id), None)
    answers = {a.status: a for a in (summary.acknowledgements if summary else ()) if a.command_id == command.command_id}
    if ACK_FAILED in answers:
        raise RollingRestartError(f"{instance_id} answered the restart {command.command_id} failed: "
                                  f"{answers[ACK_FAILED].result}")
    if summary is None or summary.epoch <= old_epoch:
        return f"no incarnation of {instance_id} newer than epoch {old_epoch} yet (it stops, then its host starts it)"
    if summary.stale:
        return f"epoch {summary.epoch} of {instance_id} is stale"
    if summary.state != "RUNNING":
        return f"epoch {summary.epoch} of {instance_id} is {summary.state}"
    if ACK_DONE not in answers:
        return f"epoch {summary.epoch} of {instance_id} has not answered {command.command_id} yet"
    unsettled = [f"{i.instance_id} is {i.state}" for i in status.instances if i.state != "RUNNING" or i.stale]
    unsettled += [f"task {t.task_id} is {t.state}" for t in status.tasks if t.state != "running"]
    if unsettled:
        return f"epoch {summary.epoch} of {instance_id} runs; the group settles: {', '.join(unsettled)}"
    return ""


def rolling_restart(
    bootstrap_servers: str | Sequence[str],
    application_id: str,
    *,
    instances: Sequence[str] | None = None,
    max_lag_records: int = DEFAULT_MAX_LAG_RECORDS,
    step_timeout_ms: int | timedelta = 300_000,
    stale_after_ms: int | timedelta = DEFAULT_STALE_AFTER_MS,
    client_configs: Mapping[str, Any] | None = None,
    poll_interval_ms: int = 250,
    progress: Callable[[str], None] = lambda line: None,
) -> RollingRestartReport:
    """Restart the live instances of ``application_id`` (or the named ``instances``, in that
    order) one at a time (module docstring); ``progress`` receives one line per step."""
    checked_bound("max_lag_records", max_lag_records, 0)
    step_ms = duration_arg_ms(step_timeout_ms, "step_timeout_ms", minimum=1)
    stale_ms = duration_arg_ms(stale_after_ms, "stale_after_ms", minimum=1)

    def read() -> ApplicationStatus:
        return fetch_application_status(bootstrap_servers, application_id, stale_after_ms=stale_ms,
                                        client_configs=client_configs, timeout_ms=min(step_ms, 10_000))

    started = time.monotonic()
    live = sorted(live_instances(read(), new_command(application_id, "restart")))
    targets = list(dict.fromkeys(instances)) if instances else live
    unknown = [i for i in targets if i not in live]
    if not targets:
        raise UnknownApplicationError(f"application {application_id!r} has no live instance (every status document "
                                      f"is stale or ended); nothing was restarted")
    if unknown:
        raise UnknownApplicationError(f"no live instance {unknown} in application {application_id!r} "
                                      f"(live: {live}); nothing was restarted")
    progress(f"rolling restart of {application_id}: {len(targets)} instance(s), one at a time; active tasks need a "
             f"standby within {max_lag_records:,} offsets first")
    done: list[InstanceRestart] = []

    def wait(what: str, instance_id: str, waiting_for: Callable[[ApplicationStatus], str]) -> ApplicationStatus:
        deadline = time.monotonic() + step_ms / 1000
        missing = "no status read yet"
        while True:
            try:
                status = read()
                missing = waiting_for(status)
                if not missing:
                    return status
            except TRANSIENT_STATUS_ERRORS as exc:  # the brokers restart, a document is not back yet
                missing = str(exc)
            if time.monotonic() >= deadline:
                restarted = ", ".join(r.instance_id for r in done) or "none"
                raise RollingRestartError(
                    f"rolling restart of {application_id} stopped at {instance_id}: {what} not within "
                    f"{step_ms / 1000:g}s; still waiting for: {missing}; restarted so far: {restarted}")
            time.sleep(poll_interval_ms / 1000)

    for instance_id in targets:
        step_started = time.monotonic()
        status = wait("caught-up standbys for its active tasks", instance_id,
                      functools.partial(ready_to_stop, instance_id=instance_id, max_lag_records=max_lag_records))
        before = status.instance(instance_id)
        standby_wait = time.monotonic() - step_started
        progress(f"{instance_id}: epoch {before.epoch}, active {', '.join(before.active_tasks) or '-'}; "
                 f"standbys caught up")
        command = new_command(application_id, "restart", instances=[instance_id])
        sent = time.monotonic()
        send_command(bootstrap_servers, command, client_configs=client_configs, timeout_ms=min(step_ms, 10_000))
        progress(f"{instance_id}: restart {command.command_id} sent")
        status = wait("back RUNNING after the restart", instance_id,
                      functools.partial(back_after_restart, command=command, instance_id=instance_id,
                                        old_epoch=before.epoch))
        after = status.instance(instance_id)
        restart = InstanceRestart(instance_id, before.epoch, after.epoch, before.active_tasks, standby_wait,
                                  time.monotonic() - sent)
        done.append(restart)
        progress(f"{instance_id}: back as epoch {after.epoch}, RUNNING, active {', '.join(after.active_tasks) or '-'} "
                 f"({restart.restart_s:.1f}s)")
    return RollingRestartReport(application_id, max_lag_records, tuple(done), time.monotonic() - started)
