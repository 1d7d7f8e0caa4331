"""The application snapshot readers build from the status documents.

Readers (the ``stateful-streams status`` CLI, the Airflow hook and sensors) combine the latest
document of every instance with *live* changelog end offsets from the brokers into an
:class:`ApplicationStatus`: per task the active owner, restoration progress and ETA, each
standby's lag, and which instances have gone quiet (stale) and so cannot be trusted.

This module is pure (no Kafka client, no clock): :func:`build_application_status` takes
the documents, the end offsets and ``now_ms`` as arguments, so the arithmetic is tested
without a broker. Reading the topic lives in :mod:`.reader`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.durations import duration_arg_ms
from airflow_stateful_provider.streams.status.document import (
    DEFAULT_STALE_AFTER_MS,
    STALE,
    STATE_LOST,
    UNASSIGNED,
    ChangelogProgress,
    CommandAcknowledgement,
    HostApplication,
    InputPartition,
    InstanceStatus,
    InstanceTask,
    SnapshotReport,
    TaskRestore,
    ThreadReport,
)
from airflow_stateful_provider.streams.status.readable import age_text
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = [
    "ActiveOwner",
    "ApplicationStatus",
    "InstanceSummary",
    "RestorationProgress",
    "StandbyReplica",
    "TaskStatus",
    "build_application_status",
]


@dataclasses.dataclass(frozen=True)
class RestorationProgress:
    """An active task's restoration, in changelog offsets, summed over its partitions.

    Every task whose owner reports it ``restoring`` has one. ``restored`` = current -
    start, ``total`` = captured end - start, ``remaining`` = total - restored; ``rate`` in
    offsets/s; ``eta_seconds`` = remaining / rate as of the owner's document (0 when nothing
    remains, None while the rate is unknown or zero). ``changelogs`` are the owner's
    per-partition start, current and end offsets.

    ``pending`` is True when the owner did not report the end offset of every changelog
    partition (a document without changelog progress: an earlier build of this provider, a custom writer):
    the restoration's size is unknown, so ``total``, ``remaining``, ``eta_seconds`` and
    :attr:`fraction` are None and ``restored`` counts only the partitions reported.
    """

    pending: bool
    restored: int
    total: int | None
    remaining: int | None
    rate: float
    eta_seconds: float | None
    changelogs: tuple[ChangelogProgress, ...] = ()

    @property
    def fraction(self) -> float | None:
        if self.total is None:
            return None
        return 1.0 if self.total == 0 else self.restored / self.total


@dataclasses.dataclass(frozen=True)
class ActiveOwner:
    instance_id: str
    host: str
    #: The task state the owner reported.
    state: str
    stale: bool


@dataclasses.dataclass(frozen=True)
class StandbyReplica:
    """A standby (or warmup) copy of a task.

    ``lag`` is in records (offsets): the sum over the task's changelog partitions of
    live end offset - current offset. ``lag_basis`` says what it was measured against:
    "live" (end offsets fetched from the brokers now), "reported" (some partition's live
    end was unavailable; the standby's last known end was used) or "unknown" (lag None).
    """

    instance_id: str
    host: str
    warmup: bool
    state: str
    lag: int | None
    lag_basis: str
    stale: bool
    #: Changelog offsets applied per second (Kafka Streams' task-level ``update-rate``).
    update_rate: float = 0.0


@dataclasses.dataclass(frozen=True)
class TaskStatus:
    """One task of the application: ``state`` is the active's reported task state, or
    "stale" (only a stale instance claims it) or "unassigned" (nobody claims it). A
    ``state_lost`` claim stays ``state_lost`` when its instance went stale (it died of it)."""

    task_id: str
    state: str
    active: ActiveOwner | None
    restoration: RestorationProgress | None
    standbys: tuple[StandbyReplica, ...]
    notes: tuple[str, ...] = ()
    #: Where the owner got the task's state (local / snapshot / changelog); None when its
    #: document does not say (earlier builds).
    restore: TaskRestore | None = None
    #: Records the active skipped, by reason ("deserialization", "processing", "production",
    #: "invalid-timestamp", "late", ...), since the task started on its owner.
    dropped_records: Mapping[str, int] = dataclasses.field(default_factory=dict, hash=False)
    #: The owner's processed records (since the task started on it) and their rate, and its
    #: input partitions' positions; None and () when its document does not say.
    process_total: int | None = None
    process_rate: float | None = None
    input_partitions: tuple[InputPartition, ...] = ()
    #: The newest snapshot of the task any claimant uploaded or the owner restored from.
    newest_snapshot: SnapshotReport | None = None

    @property
    def warmups(self) -> tuple[StandbyReplica, ...]:
        return tuple(s for s in self.standbys if s.warmup)

    @property
    def input_lag(self) -> int | None:
        """Records between the owner's input positions and the partitions' ends (None when
        any partition's is unknown, or the owner reports none)."""
        lags = [p.lag for p in self.input_partitions]
        if not lags or any(lag is None for lag in lags):
            return None
        return sum(lag for lag in lags if lag is not None)


@dataclasses.dataclass(frozen=True)
class InstanceSummary:
    instance_id: str
    host: str
    pid: int
    process_id: str
    epoch: int
    state: str
    #: "at_least_once" or "exactly_once_v2"
    processing_guarantee: str
    generation: int | None
    next_probing_rebalance_ms: int | None
    published_at: int
    #: now - published_at (0 when the publisher's clock is ahead of ours).
    age_ms: int
    stale: bool
    active_tasks: tuple[str, ...]
    standby_tasks: tuple[str, ...]
    warmup_tasks: tuple[str, ...]
    #: From the document, when it says (optional fields): thread metrics, what hosts the
    #: instance, its own metrics endpoint, its answers to control commands.
    threads: tuple[ThreadReport, ...] = ()
    host_application: HostApplication | None = None
    metrics_endpoint: str | None = None
    acknowledgements: tuple[CommandAcknowledgement, ...] = ()


@dataclasses.dataclass(frozen=True)
class ApplicationStatus:
    """The whole application as of ``now_ms`` (see :func:`build_application_status`)."""

    application_id: str
    now_ms: int
    stale_after_ms: int
    instances: tuple[InstanceSummary, ...]
    tasks: tuple[TaskStatus, ...]

    @property
    def stale_instances(self) -> tuple[InstanceSummary, ...]:
        return tuple(i for i in self.instances if i.stale)

    @property
    def unassigned_tasks(self) -> tuple[TaskStatus, ...]:
        return tuple(t for t in self.tasks if t.state == UNASSIGNED)

    @property
    def restoring_tasks(self) -> tuple[TaskStatus, ...]:
        return tuple(t for t in self.tasks if t.state == "restoring")

    @property
    def state_lost_tasks(self) -> tuple[TaskStatus, ...]:
        """Tasks refused because their changelog lost their stores' state (docs/runbook.md)."""
        return tuple(t for t in self.tasks if t.state == STATE_LOST)

    def task(self, task_id: str | TaskId) -> TaskStatus:
        wanted = str(task_id)
        for task in self.tasks:
            if task.task_id == wanted:
                return task
        raise KeyError(f"application {self.application_id!r} has no task {wanted!r} "
                       f"(tasks: {[t.task_id for t in self.tasks]})")

    def instance(self, instance_id: str) -> InstanceSummary:
        for summary in self.instances:
            if summary.instance_id == instance_id:
                return summary
        raise KeyError(f"application {self.application_id!r} has no instance {instance_id!r} "
                       f"(instances: {[i.instance_id for i in self.instances]})")

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON-compatible data (``stateful-streams status --json``)."""
        return {
            "application_id": self.application_id,
            "now_ms": self.now_ms,
            "stale_after_ms": self.stale_after_ms,
            "instances": [dataclasses.asdict(i) | {"active_tasks": list(i.active_tasks),
                                                   "standby_tasks": list(i.standby_tasks),
                                                   "warmup_tasks": list(i.warmup_tasks)}
                          for i in self.instances],
            "tasks": [_task_json(t) for t in self.tasks],
            "stale_instances": [i.instance_id for i in self.stale_instances],
            "unassigned_tasks": [t.task_id for t in self.unassigned_tasks],
            "state_lost_tasks": [t.task_id for t in self.state_lost_tasks],
        }


def _task_json(task: TaskStatus) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "state": task.state,
        "active": None if task.active is None else dataclasses.asdict(task.active),
        "restoration": None if task.restoration is None else dataclasses.asdict(task.restoration),
        "standbys": [dataclasses.asdict(s) for s in task.standbys],
        "notes": list(task.notes),
        "restore": None if task.restore is None else task.restore.to_dict(),
        "dropped_records": dict(task.dropped_records),
        "process_total": task.process_total,
        "process_rate": task.process_rate,
        "input_partitions": [p.to_dict() | {"lag": p.lag} for p in task.input_partitions],
        "input_lag": task.input_lag,
        "newest_snapshot": None if task.newest_snapshot is None else task.newest_snapshot.to_dict(),
    }


_STATE_PREFERENCE = {"running": 0, "restoring": 1, "created": 2, "suspended": 3, STATE_LOST: 4}


def build_application_status(
    documents: Mapping[str, InstanceStatus] | Iterable[InstanceStatus],
    live_end_offsets: Mapping[tuple[str, int], int],
    now_ms: int,
    stale_after_ms: int | timedelta = DEFAULT_STALE_AFTER_MS,
    *,
    application_id: str | None = None,
    expected_tasks: Iterable[str | TaskId] = (),
) -> ApplicationStatus:
    """Combine the latest document of every instance with live changelog end offsets.

    - A document published more than ``stale_after_ms`` before ``now_ms`` is stale: its
      instance is flagged and its claims are shown, marked, never trusted silently.
    - Per task, the active owner is the non-stale instance claiming it (preferring
      running, then restoring, created, suspended, state_lost, then the newest document);
      other claims become notes. Only stale claims -> state "stale" (but "state_lost" when
      the owner reported that); none -> "unassigned". Every lost changelog is a note.
    - Restoration progress comes from the owner's document while it restores; standby
      lag is measured against ``live_end_offsets`` (keys ``(topic, partition)``).
    - ``expected_tasks`` (e.g. from the topology) are listed even when nobody claims them.
    """
    docs = list(documents.values()) if isinstance(documents, Mapping) else list(documents)
    stale_after = duration_arg_ms(stale_after_ms, "stale_after_ms")
    if isinstance(now_ms, bool) or not isinstance(now_ms, int):
        raise ValueError(f"now_ms must be an int (epoch ms), got {now_ms!r}")
    app_ids = sorted({d.application_id for d in docs})
    if application_id is None:
        if len(app_ids) != 1:
            raise ValueError(f"documents belong to applications {app_ids}; pass application_id to choose"
                             if app_ids else "no documents and no application_id")
        application_id = app_ids[0]
    foreign = [d.instance_id for d in docs if d.application_id != application_id]
    if foreign:
        raise ValueError(f"documents of instances {foreign} belong to another application than {application_id!r}")
    ends = {(tp[0], tp[1]): int(offset) for tp, offset in live_end_offsets.items()}

    age = {d.instance_id: max(0, now_ms - d.published_at) for d in docs}
    stale = {d.instance_id: age[d.instance_id] > stale_after for d in docs}

    claims: dict[str, list[tuple[InstanceStatus, InstanceTask]]] = {}
    for doc in docs:
        for task in doc.tasks:
            claims.setdefault(task.task_id, []).append((doc, task))
    task_ids = set(claims) | {str(t) for t in expected_tasks}

    tasks = []
    for task_id in sorted(task_ids, key=_task_sort_key):
        tasks.append(_task_status(task_id, claims.get(task_id, []), ends, age, stale, now_ms))

    instances = tuple(
        InstanceSummary(
            instance_id=d.instance_id, host=d.host, pid=d.pid, process_id=d.process_id, epoch=d.epoch,
            state=d.state, processing_guarantee=d.processing_guarantee, generation=d.generation,
            next_probing_rebalance_ms=d.next_probing_rebalance_ms,
            published_at=d.published_at, age_ms=age[d.instance_id], stale=stale[d.instance_id],
            active_tasks=_tasks_with_role(d, "active"), standby_tasks=_tasks_with_role(d, "standby"),
            warmup_tasks=_tasks_with_role(d, "warmup"), threads=d.threads, host_application=d.host_application,
            metrics_endpoint=d.metrics_endpoint, acknowledgements=d.acknowledgements)
        for d in sorted(docs, key=lambda d: d.instance_id))
    return ApplicationStatus(application_id, now_ms, stale_after, instances, tuple(tasks))


def _task_sort_key(task_id: str) -> tuple:
    try:
        parsed = TaskId.parse(task_id)
        return (0, parsed.subtopology, parsed.partition, "")
    except ValueError:
        return (1, 0, 0, task_id)


def _tasks_with_role(doc: InstanceStatus, role: str) -> tuple[str, ...]:
    return tuple(sorted((t.task_id for t in doc.tasks if t.role == role), key=_task_sort_key))


def _task_status(task_id: str, claims: list[tuple[InstanceStatus, InstanceTask]], ends: Mapping[tuple[str, int], int],
                 age: Mapping[str, int], stale: Mapping[str, bool], now_ms: int) -> TaskStatus:
    notes: list[str] = []
    actives = [(d, t) for d, t in claims if t.role == "active"]
    ranked = sorted(actives, key=lambda c: (stale[c[0].instance_id], _STATE_PREFERENCE[c[1].state],
                                            -c[0].published_at, c[0].instance_id))
    owner = ranked[0] if ranked else None
    restoration = None
    if owner is None:
        state, active = UNASSIGNED, None
        notes.append("no instance runs this task")
    else:
        doc, task = owner
        active = ActiveOwner(doc.instance_id, doc.host, task.state, stale[doc.instance_id])
        if active.stale and task.state != STATE_LOST:  # a lost state stays lost when its reporter died of it
            state = STALE
            notes.append(f"owner {doc.instance_id} last published {age_text(age[doc.instance_id])} ago "
                         f"(stale; reported {task.state})")
        else:
            state = task.state
        if task.state == "restoring":
            restoration = _restoration(task.changelogs, notes)
            if task.restore is not None:
                notes.append(restore_note(task.restore, now_ms))
        if task.restore is not None and task.restore.skipped:
            notes.append(f"{len(task.restore.skipped)} snapshot(s) skipped: {task.restore.skipped[0]}")
        for other_doc, other in ranked[1:]:
            flag = " (stale)" if stale[other_doc.instance_id] else ""
            notes.append(f"also claimed active by {other_doc.instance_id}{flag} ({other.state})")
    if owner is not None and owner[1].dropped_records:
        dropped = owner[1].dropped_records
        notes.append(f"{sum(dropped.values()):,} record(s) skipped: "
                     + ", ".join(f"{reason} {count:,}" for reason, count in sorted(dropped.items())))
    for doc, task in claims:
        for lost in task.lost_changelogs:
            notes.append(f"STATE LOST on {doc.instance_id} ({task.role}): {lost.describe()}; see docs/runbook.md")
    partitions = sorted({c.topic_partition for _, t in claims for c in t.changelogs})
    standbys = tuple(
        _standby(doc, task, partitions, ends, stale[doc.instance_id], notes)
        for doc, task in sorted(((d, t) for d, t in claims if t.role != "active"),
                                key=lambda c: (c[1].role, c[0].instance_id)))
    owned = None if owner is None else owner[1]
    return TaskStatus(task_id, state, active, restoration, standbys, tuple(notes),
                      None if owned is None else owned.restore,
                      {} if owned is None else dict(owned.dropped_records),
                      process_total=None if owned is None else owned.process_total,
                      process_rate=None if owned is None else owned.process_rate,
                      input_partitions=() if owned is None else owned.input_partitions,
                      newest_snapshot=_newest_snapshot(claims, owned))


def _newest_snapshot(claims: Sequence[tuple[InstanceStatus, InstanceTask]],
                     owned: InstanceTask | None) -> SnapshotReport | None:
    known = [t.last_snapshot for _, t in claims if t.last_snapshot is not None]
    restore = None if owned is None else owned.restore
    if restore is not None and restore.snapshot_id is not None and restore.snapshot_taken_at is not None:
        known.append(SnapshotReport(restore.snapshot_id, restore.snapshot_taken_at))
    return max(known, key=lambda s: s.taken_at, default=None)


def restore_note(restore: TaskRestore, now_ms: int) -> str:
    """One line on where a task's state comes from, e.g. ``from snapshot 1700...-ab12cd34
    (taken 12m ago, 4,000,000 offsets) + changelog 1,234``."""
    if restore.source == "snapshot":
        age = restore.snapshot_age_ms(now_ms)
        return (f"from snapshot {restore.snapshot_id} (taken {age_text(age or 0)} ago, "
                f"{restore.snapshot_offsets:,} offsets) + changelog {restore.changelog_records:,}")
    if restore.source == "local":
        return f"from local state + changelog {restore.changelog_records:,}"
    return f"from the changelog alone: {restore.changelog_records:,} records"


def _restoration(changelogs: Sequence[ChangelogProgress], notes: list[str]) -> RestorationProgress:
    restored = total = 0
    rate = 0.0
    unknown_ends = [c for c in changelogs if c.end_offset is None]
    for c in changelogs:
        span = None if c.end_offset is None else max(0, c.end_offset - c.start_offset)
        advanced = max(0, c.current_offset - c.start_offset)
        restored += advanced if span is None else min(span, advanced)
        total += span or 0
        rate += c.restore_rate
    if not changelogs or unknown_ends:
        missing = ", ".join(f"{c.topic}-{c.partition}" for c in unknown_ends) or "any changelog partition"
        notes.append(f"restoration pending: the owner reports no end offset for {missing}")
        return RestorationProgress(True, restored, None, None, rate, None, tuple(changelogs))
    remaining = total - restored
    if remaining == 0:
        eta: float | None = 0.0
    elif rate > 0:
        eta = remaining / rate
    else:
        eta = None
    return RestorationProgress(False, restored, total, remaining, rate, eta, tuple(changelogs))


def _standby(doc: InstanceStatus, task: InstanceTask, partitions: Sequence[tuple[str, int]],
             ends: Mapping[tuple[str, int], int], is_stale: bool, notes: list[str]) -> StandbyReplica:
    own = {c.topic_partition: c for c in task.changelogs}
    lag: int | None = 0
    basis = "live"
    if not partitions:
        lag, basis = None, "unknown"
    for tp in partitions:
        entry = own.get(tp)
        if entry is None:
            notes.append(f"{task.role} {doc.instance_id} reports no position for changelog {tp[0]}-{tp[1]}; "
                         f"its lag is unknown")
            lag, basis = None, "unknown"
            break
        end = ends.get(tp)
        if end is None:
            end = entry.end_offset
            basis = "reported"
        if end is None:
            notes.append(f"no end offset known for changelog {tp[0]}-{tp[1]}; lag of {doc.instance_id} unknown")
            lag, basis = None, "unknown"
            break
        if lag is not None:  # always, here: every path that makes it None breaks out
            lag += max(0, end - entry.current_offset)
    if basis == "reported":
        notes.append(f"lag of {doc.instance_id} measured against its last reported end (live end unavailable)")
    if is_stale:
        notes.append(f"{task.role} {doc.instance_id} is stale")
    return StandbyReplica(doc.instance_id, doc.host, task.role == "warmup", task.state, lag, basis, is_stale,
                          update_rate=sum(c.restore_rate for c in task.changelogs))
