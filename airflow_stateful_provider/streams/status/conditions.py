"""When is an application restored, or its standbys caught up: the conditions the Airflow
sensors wait for, as pure functions of an :class:`ApplicationStatus`.

Both the sensors (poke mode) and the triggers (deferrable mode) evaluate these, so the
two modes cannot disagree; they live with the snapshot they read, so neither of the two
Airflow packages imports the other for them. Each returns a :class:`ConditionResult`: whether the condition
holds, one row per task with what it still waits for, and the progress table the sensors
log (and put into the failure message on timeout, restricted to the stuck tasks).

Stale documents are never trusted: a task whose owner (or standby) stopped publishing
counts as not done, whatever it last claimed. Neither condition holds vacuously: an
application reporting no task, or (standby lag) no task known to have state, is not done.
Neither holds while the group's assignment is unsettled (an instance still joining, or
instances at different group generations): the next assignment may move any task.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from airflow_stateful_provider.streams.errors import (
    BrokerUnreachableError,
    StatusReadTimeoutError,
    UnknownApplicationError,
)
from airflow_stateful_provider.streams.status.application import ApplicationStatus, TaskStatus, restore_note
from airflow_stateful_provider.streams.status.document import STATE_LOST
from airflow_stateful_provider.streams.status.readable import age_text, duration_text
from airflow_stateful_provider.streams.status.rendering import columns, restoration_cells
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = ["TaskCheck", "ConditionResult", "normalize_task_ids", "restoration_condition", "standby_lag_condition",
           "stateful_task_ids", "TRANSIENT_STATUS_ERRORS", "UNTRUSTED_INSTANCE_STATES"]

#: Status read failures worth retrying until the sensor's timeout: the application may not
#: have published yet (a sensor right after the submit), the brokers may be restarting.
#: Anything else (malformed documents, a bad connection) will not fix itself.
TRANSIENT_STATUS_ERRORS = (UnknownApplicationError, BrokerUnreachableError, StatusReadTimeoutError)
#: An owner whose instance is in one of these states is shutting down or failed: not done.
UNTRUSTED_INSTANCE_STATES = frozenset({"PENDING_SHUTDOWN", "NOT_RUNNING", "PENDING_ERROR", "ERROR"})


@dataclasses.dataclass(frozen=True)
class TaskCheck:
    """One task's verdict: ``cells`` for the table, ``waiting_for`` empty when done."""

    task_id: str
    done: bool
    waiting_for: str
    cells: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ConditionResult:
    """Verdict of a condition on one snapshot."""

    done: bool
    #: One line: what was checked and what is missing.
    summary: str
    header: tuple[str, ...]
    checks: tuple[TaskCheck, ...]
    #: Reasons not tied to a task (no task reported, stateful tasks unknown, stale instances).
    problems: tuple[str, ...] = ()

    @property
    def stuck(self) -> tuple[TaskCheck, ...]:
        return tuple(c for c in self.checks if not c.done)

    def table(self, *, stuck_only: bool = False) -> str:
        """The summary, one row per task (or per stuck task), then the problems."""
        checks = self.stuck if stuck_only else self.checks
        lines = [self.summary]
        if checks:
            lines += columns(self.header, [(*c.cells, "yes" if c.done else "no", c.waiting_for or "-")
                                            for c in checks])
        lines += [f"! {p}" for p in self.problems]
        return "\n".join(lines)


def checked_bound(name: str, value: Any, minimum: int) -> int:
    """A condition's integer bound (``max_lag_records`` ...), shared by the sensors and their
    triggers; anything else is a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def normalize_task_ids(task_ids: str | Iterable[str | TaskId] | None) -> tuple[str, ...] | None:
    """None (all tasks), a comma-separated string (a rendered template) or task ids ->
    a tuple of ``"<subtopology>_<partition>"`` strings; a malformed id is a ValueError naming it."""
    if task_ids is None:
        return None
    items = task_ids.split(",") if isinstance(task_ids, str) else list(task_ids)
    result = []
    for item in items:
        text = str(item).strip()
        try:
            result.append(str(TaskId.parse(text)))
        except ValueError:
            raise ValueError(f"task_ids: {item!r} is not a task id like '0_1' (subtopology_partition); "
                             f"got task_ids={task_ids!r}") from None
    if not result:
        raise ValueError(f"task_ids must name at least one task or be None (all tasks), got {task_ids!r}")
    return tuple(dict.fromkeys(result))


def _unsettled_assignment(status: ApplicationStatus) -> list[str]:
    """Why the group's assignment may still change, or nothing. A live instance without a
    group generation has not joined yet (the group's first assignment went to the others,
    and the rebalance its join starts may move any task to it); live instances at different
    generations are in the middle of a rebalance. Instances failing or shutting down are
    left to the owner checks."""
    live = [i for i in status.instances if not i.stale and i.state not in UNTRUSTED_INSTANCE_STATES]
    joining = [i for i in live if i.generation is None]
    joined = [i for i in live if i.generation is not None]
    problems = []
    if joining:
        problems.append("the assignment is not settled: not in the group yet: "
                        + ", ".join(f"{i.instance_id}@{i.host} ({i.state})" for i in joining)
                        + " (the rebalance a join starts may move any task)")
    if len({i.generation for i in joined}) > 1:
        problems.append("the assignment is not settled: a rebalance is under way (group generations "
                        + ", ".join(f"{i.instance_id} {i.generation}" for i in joined) + ")")
    return problems


def _verdict_tail(stuck: list[str], unsettled: list[str], done: bool, done_word: str) -> str:
    """The end of a condition's summary: what it waits for, or ``done_word``."""
    return ((f"; waiting for {', '.join(stuck)}" if stuck else "")
            + ("; waiting for the assignment to settle" if unsettled else "") + (f" - {done_word}" if done else ""))


def _owner_problem(status: ApplicationStatus, task: TaskStatus) -> str | None:
    """Why the task's active owner cannot be trusted, or None."""
    if task.active is None:
        return "no instance runs this task (unassigned)"
    if task.active.stale:
        age = _instance_age(status, task.active.instance_id)
        return (f"owner {task.active.instance_id} is stale (last published {age} ago, "
                f"reported {task.active.state}): not trusted")
    state = _instance_state(status, task.active.instance_id)
    if state in UNTRUSTED_INSTANCE_STATES:
        return f"owner instance {task.active.instance_id} is {state}"
    return None


def _instance_age(status: ApplicationStatus, instance_id: str) -> str:
    try:
        return age_text(status.instance(instance_id).age_ms)
    except KeyError:
        return "?"


def _instance_state(status: ApplicationStatus, instance_id: str) -> str | None:
    try:
        return status.instance(instance_id).state
    except KeyError:
        return None


def _owner_text(task: TaskStatus | None) -> str:
    if task is None or task.active is None:
        return "-"
    return f"{task.active.instance_id}@{task.active.host}" + (" STALE" if task.active.stale else "")


def _selected(status: ApplicationStatus, task_ids: Sequence[str] | None) -> list[tuple[str, TaskStatus | None]]:
    known = {t.task_id: t for t in status.tasks}
    if task_ids is None:
        return [(t.task_id, t) for t in status.tasks]
    return [(task_id, known.get(task_id)) for task_id in task_ids]


def _stale_problem(status: ApplicationStatus) -> list[str]:
    stale = status.stale_instances
    if not stale:
        return []
    return [f"stale instance(s), no document for more than {age_text(status.stale_after_ms)}: "
            + ", ".join(f"{i.instance_id}@{i.host} (last published {age_text(i.age_ms)} ago)" for i in stale)]


# ---------------------------------------------------------------------------- restoration

_RESTORATION_HEADER = ("TASK", "STATE", "OWNER", "RESTORED/TOTAL", "RATE", "ETA", "SOURCE", "DONE", "WAITING FOR")


def restoration_condition(
    status: ApplicationStatus,
    *,
    task_ids: str | Iterable[str | TaskId] | None = None,
    max_remaining_records: int = 0,
) -> ConditionResult:
    """Restoration is complete when every selected task (``task_ids``, default all) has a
    trusted active owner (not stale, instance not failing or shutting down) that is
    running, or restoring with at most ``max_remaining_records`` changelog offsets left."""
    if isinstance(max_remaining_records, bool) or not isinstance(max_remaining_records, int) \
            or max_remaining_records < 0:
        raise ValueError(f"max_remaining_records must be an int >= 0, got {max_remaining_records!r}")
    selected = _selected(status, normalize_task_ids(task_ids))
    checks = []
    for task_id, task in selected:
        progress, rate, eta = restoration_cells(None if task is None else task.restoration)
        cells = (task_id, "unassigned" if task is None else task.state, _owner_text(task), progress, rate, eta,
                 _source_text(task, status.now_ms))
        waiting = _restoration_waiting_for(status, task, max_remaining_records)
        checks.append(TaskCheck(task_id, not waiting, waiting, cells))
    problems = [] if selected else ["no task reported yet (no instance has claimed a task)"]
    unsettled = _unsettled_assignment(status)
    problems += unsettled + _stale_problem(status)
    done = bool(selected) and all(c.done for c in checks) and not unsettled
    stuck = [c.task_id for c in checks if not c.done]
    scope = "all tasks" if task_ids is None else f"tasks {[t for t, _ in selected]}"
    summary = (f"restoration of {status.application_id} ({scope}, at most {max_remaining_records:,} offsets "
               f"remaining): {len(checks) - len(stuck)}/{len(checks)} task(s) done"
               + _verdict_tail(stuck, unsettled, done, "COMPLETE"))
    return ConditionResult(done, summary, _RESTORATION_HEADER, tuple(checks), tuple(problems))


def _source_text(task: TaskStatus | None, now_ms: int) -> str:
    """Where the owner got the task's state: ``local``, ``changelog`` or ``snapshot (12m old)``."""
    restore = None if task is None else task.restore
    if restore is None:
        return "-"
    if restore.source == "snapshot":
        return f"snapshot ({age_text(restore.snapshot_age_ms(now_ms) or 0)} old)"
    return restore.source


def _restoration_waiting_for(status: ApplicationStatus, task: TaskStatus | None, max_remaining: int) -> str:
    if task is None:
        return "no instance reports this task"
    if task.state == STATE_LOST:
        return ("state lost: its changelog no longer holds what its stores held; nothing restores it until "
                "someone acts (docs/runbook.md, \"A task's state is lost\")")
    problem = _owner_problem(status, task)
    if problem is not None:
        return problem
    if task.state == "running":
        return ""
    if task.state == "restoring":
        r = task.restoration
        if r is None or r.remaining is None:  # pending: not every changelog end offset reported
            return "restoring; waiting for the owner to report its changelog end offsets"
        if r.remaining <= max_remaining:
            return ""
        eta = "unknown (no progress)" if r.eta_seconds is None else duration_text(r.eta_seconds)
        source = "" if task.restore is None else f"; {restore_note(task.restore, status.now_ms)}"
        return f"restoring: {r.remaining:,} offsets remaining (> {max_remaining:,}), ETA {eta}{source}"
    return f"owner reports the task {task.state}"


# ---------------------------------------------------------------------------- standby lag

_STANDBY_HEADER = ("TASK", "ACTIVE", "STANDBYS OK/REQUIRED", "STANDBYS (LAG)", "DONE", "WAITING FOR")


def stateful_task_ids(status: ApplicationStatus) -> tuple[str, ...]:
    """Tasks known to have state: those of every subtopology where some task has a standby,
    a warmup or a restoring active (every task of a subtopology holds the same stores). A
    running active reports no changelog, so a subtopology without any of those is unknown."""
    def subtopology(task_id: str) -> int | None:
        try:
            return TaskId.parse(task_id).subtopology
        except ValueError:
            return None

    stateful = {subtopology(t.task_id) for t in status.tasks if t.standbys or t.restoration is not None}
    stateful.discard(None)
    return tuple(t.task_id for t in status.tasks if subtopology(t.task_id) in stateful)


def standby_lag_condition(
    status: ApplicationStatus,
    *,
    max_lag_records: int,
    min_standbys_per_task: int = 1,
    task_ids: str | Iterable[str | TaskId] | None = None,
) -> ConditionResult:
    """Standby lag is within bounds when every stateful task (``task_ids``, default the
    tasks :func:`stateful_task_ids` finds) has at least ``min_standbys_per_task`` standbys
    that are not stale, report their position, and lag at most ``max_lag_records`` offsets
    behind the live changelog end. Warmups are moving tasks, not replicas: not counted."""
    for name, value, minimum in (("max_lag_records", max_lag_records, 0),
                                 ("min_standbys_per_task", min_standbys_per_task, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    wanted = normalize_task_ids(task_ids)
    problems: list[str] = []
    if wanted is None:
        inferred = stateful_task_ids(status)
        if not inferred:
            problems.append("no task reports a changelog (no standby, warmup or restoring active), so the stateful "
                            "tasks are unknown; pass task_ids to name them")
        selected: list[tuple[str, TaskStatus | None]] = [(t, status.task(t)) for t in inferred]
    else:
        selected = _selected(status, wanted)
    checks = []
    for task_id, task in selected:
        standbys = () if task is None else task.standbys
        ok = [s for s in standbys
              if not s.warmup and not s.stale and s.lag is not None and s.lag <= max_lag_records]
        lags = ", ".join(
            ("warmup " if s.warmup else "") + f"{s.instance_id}@{s.host} ("
            + ("?" if s.lag is None else f"{s.lag:,}") + (" STALE" if s.stale else "") + ")"
            for s in standbys) or "-"
        cells = (task_id, _owner_text(task), f"{len(ok)}/{min_standbys_per_task}", lags)
        waiting = ""
        if task is None:
            waiting = "no instance reports this task"
        elif len(ok) < min_standbys_per_task:
            waiting = (f"{len(ok)} of {min_standbys_per_task} standby(s) within {max_lag_records:,} offsets"
                       + "".join(f"; {_standby_problem(s, max_lag_records)}" for s in standbys if s not in ok))
        checks.append(TaskCheck(task_id, not waiting, waiting, cells))
    unsettled = _unsettled_assignment(status)
    problems += unsettled + _stale_problem(status)
    done = bool(selected) and all(c.done for c in checks) and not unsettled
    stuck = [c.task_id for c in checks if not c.done]
    scope = "stateful tasks" if wanted is None else f"tasks {list(wanted)}"
    summary = (f"standby lag of {status.application_id} ({scope}, >= {min_standbys_per_task} standby(s) "
               f"per task within {max_lag_records:,} offsets): {len(checks) - len(stuck)}/{len(checks)} task(s) ok"
               + _verdict_tail(stuck, unsettled, done, "OK"))
    return ConditionResult(done, summary, _STANDBY_HEADER, tuple(checks), tuple(problems))


def _standby_problem(replica: Any, max_lag: int) -> str:
    who = f"{'warmup' if replica.warmup else 'standby'} {replica.instance_id}"
    if replica.warmup:
        return f"{who} not counted (a warmup moves the task, it is no replica)"
    if replica.stale:
        return f"{who} is stale: not trusted"
    if replica.lag is None:
        return f"{who} lag unknown (reports no position)"
    return f"{who} lags {replica.lag:,} > {max_lag:,}"
