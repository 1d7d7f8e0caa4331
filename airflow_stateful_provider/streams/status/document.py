"""The status topic's document and the application snapshot readers build from it.

Every instance publishes an :class:`InstanceStatus` document, keyed by its instance id, to
the compacted topic ``<application_id>-status`` (see docs/status-topic.md). Readers (the
``stateful-streams status`` CLI, the Airflow hook and sensors) combine the latest document
of every instance with *live* changelog end offsets from the brokers into an
:class:`ApplicationStatus`: per task the active owner, restoration progress and ETA, each
standby's lag, and which instances have gone quiet (stale) and so cannot be trusted.

This module is pure (no Kafka client, no clock): :func:`build_application_status` takes
the documents, the end offsets and ``now_ms`` as arguments, so the arithmetic is tested
without a broker. Reading the topic lives in :mod:`.runtime.status_publisher`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.durations import duration_arg_ms
from airflow_stateful_provider.streams.errors import StatusFormatError, UnsupportedStatusVersionError
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = [
    "STATUS_FORMAT_VERSION",
    "DEFAULT_STATUS_INTERVAL_MS",
    "DEFAULT_STALE_AFTER_MS",
    "INSTANCE_STATES",
    "TASK_ROLES",
    "TASK_STATES",
    "status_topic_name",
    "control_topic_name",
    "ChangelogProgress",
    "InstanceTask",
    "CommandAcknowledgement",
    "InstanceStatus",
    "RestorationProgress",
    "ActiveOwner",
    "StandbyReplica",
    "TaskStatus",
    "InstanceSummary",
    "ApplicationStatus",
    "build_application_status",
    "progress_bar",
    "restoration_cells",
    "render_status_table",
]

#: Version of the document written by this code. Readers accept this and older versions and
#: reject newer ones (a newer writer may have changed a field's meaning).
STATUS_FORMAT_VERSION = 1
#: How often an instance republishes its document when nothing changes.
DEFAULT_STATUS_INTERVAL_MS = 10_000
#: A document older than this is stale: three missed publications.
DEFAULT_STALE_AFTER_MS = 3 * DEFAULT_STATUS_INTERVAL_MS

#: KafkaStreams instance states (kafka_streams.KafkaStreamsState values).
INSTANCE_STATES = frozenset({"CREATED", "REBALANCING", "RUNNING", "PENDING_SHUTDOWN", "NOT_RUNNING",
                             "PENDING_ERROR", "ERROR"})
TASK_ROLES = ("active", "standby", "warmup")
TASK_STATES = ("created", "restoring", "running", "suspended")

#: Task states of the snapshot beyond TASK_STATES.
STALE = "stale"
UNASSIGNED = "unassigned"


def status_topic_name(application_id: str) -> str:
    """``<application_id>-status``: compacted, one partition, one document per instance."""
    return f"{application_id}-status"


def control_topic_name(application_id: str) -> str:
    """``<application_id>-control``: commands to the instances (delete policy, one partition)."""
    return f"{application_id}-control"


# ---------------------------------------------------------------------------- the document


@dataclasses.dataclass(frozen=True)
class ChangelogProgress:
    """One changelog partition of a task, as the publishing instance sees it.

    ``current_offset`` is the next offset the instance will read from the changelog: the
    offset of the last record it applied + 1, or further when the consumer skipped offsets
    that hold no record (compaction gaps, transaction markers). ``end_offset`` is, for an
    active task, the log end offset captured when its restoration started (it stops
    there); for a standby, the last end offset it saw (None when unknown).
    ``restore_rate`` is offsets advanced per second over the publisher's recent window.
    """

    topic: str
    partition: int
    store: str
    start_offset: int
    current_offset: int
    end_offset: int | None
    restore_rate: float = 0.0

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "store": self.store,
                "start_offset": self.start_offset, "current_offset": self.current_offset,
                "end_offset": self.end_offset, "restore_rate": self.restore_rate}


@dataclasses.dataclass(frozen=True)
class InstanceTask:
    """A task an instance holds: its role, its state and its changelog partitions.

    Running active tasks list no changelogs: their stores are current with their input.
    """

    task_id: str
    role: str
    state: str
    changelogs: tuple[ChangelogProgress, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "role": self.role, "state": self.state,
                "changelogs": [c.to_dict() for c in self.changelogs]}


@dataclasses.dataclass(frozen=True)
class CommandAcknowledgement:
    """An instance's answer to a command of the control topic (status e.g. "accepted",
    "done", "failed"; ``result`` any JSON value; ``at`` epoch ms)."""

    command_id: str
    status: str
    result: Any
    at: int

    def to_dict(self) -> dict[str, Any]:
        return {"command_id": self.command_id, "status": self.status, "result": self.result, "at": self.at}


@dataclasses.dataclass(frozen=True)
class InstanceStatus:
    """The document one instance publishes (see docs/status-topic.md for every field)."""

    instance_id: str
    application_id: str
    state: str
    epoch: int
    host: str
    pid: int
    process_id: str
    published_at: int
    generation: int | None = None
    next_probing_rebalance_ms: int | None = None
    tasks: tuple[InstanceTask, ...] = ()
    acknowledgements: tuple[CommandAcknowledgement, ...] = ()

    format_version = STATUS_FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": STATUS_FORMAT_VERSION,
            "instance_id": self.instance_id,
            "application_id": self.application_id,
            "state": self.state,
            "epoch": self.epoch,
            "host": self.host,
            "pid": self.pid,
            "process_id": self.process_id,
            "generation": self.generation,
            "next_probing_rebalance_ms": self.next_probing_rebalance_ms,
            "published_at": self.published_at,
            "tasks": [t.to_dict() for t in self.tasks],
            "acknowledgements": [a.to_dict() for a in self.acknowledgements],
        }

    def to_json_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")

    @classmethod
    def from_json_bytes(cls, raw: bytes | str, *, key: str) -> InstanceStatus:
        """Parse a record value of the status topic whose record key is ``key``."""
        try:
            text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
            data = json.loads(text)
        except (UnicodeDecodeError, ValueError) as exc:
            raise StatusFormatError(f"status document of instance {key!r} is not valid UTF-8 JSON: {exc}") from None
        return cls.from_dict(data, key=key)

    @classmethod
    def from_dict(cls, data: Any, *, key: str | None = None) -> InstanceStatus:
        """Strict parse: every field checked, errors name the instance and the field.

        Unknown fields are ignored (a writer may add optional fields without a version
        bump); a ``format_version`` newer than ours raises UnsupportedStatusVersionError.
        """
        return _DocumentParser(data, key).parse()


class _DocumentParser:
    """Parses one document; knows the instance key so every error can name it."""

    def __init__(self, data: Any, key: str | None) -> None:
        self.data = data
        self.key = key

    def _who(self) -> str:
        if self.key is not None:
            return f"instance {self.key!r}"
        if isinstance(self.data, Mapping) and isinstance(self.data.get("instance_id"), str):
            return f"instance {self.data['instance_id']!r}"
        return "an unnamed instance"

    def fail(self, path: str, problem: str) -> StatusFormatError:
        return StatusFormatError(f"status document of {self._who()}: field {path!r} {problem}")

    def field(self, obj: Mapping[str, Any], name: str, path: str) -> Any:
        if name not in obj:
            raise self.fail(path, "is missing")
        return obj[name]

    def integer(self, obj: Mapping[str, Any], name: str, path: str, *, minimum: int | None = 0,
                nullable: bool = False) -> int | None:
        value = self.field(obj, name, path)
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
            bound = "" if minimum is None else f" >= {minimum}"
            raise self.fail(path, f"must be an int{bound}{' or null' if nullable else ''}, got {value!r}")
        return value

    def text(self, obj: Mapping[str, Any], name: str, path: str, *, choices: Iterable[str] | None = None) -> str:
        value = self.field(obj, name, path)
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"must be a non-empty string, got {value!r}")
        if choices is not None and value not in choices:
            raise self.fail(path, f"must be one of {sorted(choices)}, got {value!r}")
        return value

    def rate(self, obj: Mapping[str, Any], name: str, path: str) -> float:
        value = self.field(obj, name, path)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise self.fail(path, f"must be a finite number >= 0, got {value!r}")
        return float(value)

    def listing(self, obj: Mapping[str, Any], name: str, path: str) -> list[Any]:
        value = self.field(obj, name, path)
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, got {type(value).__name__}")
        return value

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be an object, got {type(value).__name__}")
        return value

    def parse(self) -> InstanceStatus:
        data = self.data
        if not isinstance(data, Mapping):
            raise StatusFormatError(f"status document of {self._who()} must be a JSON object, "
                                    f"got {type(data).__name__}")
        version = self.integer(data, "format_version", "format_version", minimum=1)
        if version > STATUS_FORMAT_VERSION:
            raise UnsupportedStatusVersionError(
                f"status document of {self._who()} has format_version {version}, newer than the "
                f"{STATUS_FORMAT_VERSION} this reader understands; upgrade airflow-stateful-provider where you "
                f"read the status")
        instance_id = self.text(data, "instance_id", "instance_id")
        if self.key is not None and instance_id != self.key:
            raise self.fail("instance_id", f"is {instance_id!r} but the record key is {self.key!r}")
        tasks = tuple(self.task(t, f"tasks[{i}]")
                      for i, t in enumerate(self.listing(data, "tasks", "tasks")))
        acks = tuple(self.acknowledgement(a, f"acknowledgements[{i}]")
                     for i, a in enumerate(self.listing(data, "acknowledgements", "acknowledgements")))
        return InstanceStatus(
            instance_id=instance_id,
            application_id=self.text(data, "application_id", "application_id"),
            state=self.text(data, "state", "state", choices=INSTANCE_STATES),
            epoch=self.integer(data, "epoch", "epoch"),
            host=self.text(data, "host", "host"),
            pid=self.integer(data, "pid", "pid"),
            process_id=self.text(data, "process_id", "process_id"),
            generation=self.integer(data, "generation", "generation", minimum=None, nullable=True),
            next_probing_rebalance_ms=self.integer(data, "next_probing_rebalance_ms", "next_probing_rebalance_ms",
                                                   nullable=True),
            published_at=self.integer(data, "published_at", "published_at"),
            tasks=tasks,
            acknowledgements=acks,
        )

    def task(self, raw: Any, path: str) -> InstanceTask:
        obj = self.mapping(raw, path)
        task_id = self.text(obj, "task_id", f"{path}.task_id")
        try:
            TaskId.parse(task_id)
        except ValueError as exc:
            raise self.fail(f"{path}.task_id", str(exc)) from None
        changelogs = tuple(self.changelog(c, f"{path}.changelogs[{i}]")
                           for i, c in enumerate(self.listing(obj, "changelogs", f"{path}.changelogs")))
        return InstanceTask(task_id, self.text(obj, "role", f"{path}.role", choices=TASK_ROLES),
                            self.text(obj, "state", f"{path}.state", choices=TASK_STATES), changelogs)

    def changelog(self, raw: Any, path: str) -> ChangelogProgress:
        obj = self.mapping(raw, path)
        return ChangelogProgress(
            topic=self.text(obj, "topic", f"{path}.topic"),
            partition=self.integer(obj, "partition", f"{path}.partition"),
            store=self.text(obj, "store", f"{path}.store"),
            start_offset=self.integer(obj, "start_offset", f"{path}.start_offset"),
            current_offset=self.integer(obj, "current_offset", f"{path}.current_offset"),
            end_offset=self.integer(obj, "end_offset", f"{path}.end_offset", nullable=True),
            restore_rate=self.rate(obj, "restore_rate", f"{path}.restore_rate"),
        )

    def acknowledgement(self, raw: Any, path: str) -> CommandAcknowledgement:
        obj = self.mapping(raw, path)
        return CommandAcknowledgement(
            command_id=self.text(obj, "command_id", f"{path}.command_id"),
            status=self.text(obj, "status", f"{path}.status"),
            result=self.field(obj, "result", f"{path}.result"),
            at=self.integer(obj, "at", f"{path}.at"),
        )


# ---------------------------------------------------------------------------- the snapshot


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


@dataclasses.dataclass(frozen=True)
class TaskStatus:
    """One task of the application: ``state`` is the active's reported task state, or
    "stale" (only a stale instance claims it) or "unassigned" (nobody claims it)."""

    task_id: str
    state: str
    active: ActiveOwner | None
    restoration: RestorationProgress | None
    standbys: tuple[StandbyReplica, ...]
    notes: tuple[str, ...] = ()

    @property
    def warmups(self) -> tuple[StandbyReplica, ...]:
        return tuple(s for s in self.standbys if s.warmup)


@dataclasses.dataclass(frozen=True)
class InstanceSummary:
    instance_id: str
    host: str
    pid: int
    process_id: str
    epoch: int
    state: str
    generation: int | None
    next_probing_rebalance_ms: int | None
    published_at: int
    #: now - published_at (0 when the publisher's clock is ahead of ours).
    age_ms: int
    stale: bool
    active_tasks: tuple[str, ...]
    standby_tasks: tuple[str, ...]
    warmup_tasks: tuple[str, ...]


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
        }


def _task_json(task: TaskStatus) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "state": task.state,
        "active": None if task.active is None else dataclasses.asdict(task.active),
        "restoration": None if task.restoration is None else dataclasses.asdict(task.restoration),
        "standbys": [dataclasses.asdict(s) for s in task.standbys],
        "notes": list(task.notes),
    }


_STATE_PREFERENCE = {"running": 0, "restoring": 1, "created": 2, "suspended": 3}


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
      running, then restoring, created, suspended, then the newest document); other
      claims become notes. Only stale claims -> state "stale"; none -> "unassigned".
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
        tasks.append(_task_status(task_id, claims.get(task_id, []), ends, age, stale))

    instances = tuple(
        InstanceSummary(
            instance_id=d.instance_id, host=d.host, pid=d.pid, process_id=d.process_id, epoch=d.epoch,
            state=d.state, generation=d.generation, next_probing_rebalance_ms=d.next_probing_rebalance_ms,
            published_at=d.published_at, age_ms=age[d.instance_id], stale=stale[d.instance_id],
            active_tasks=_tasks_with_role(d, "active"), standby_tasks=_tasks_with_role(d, "standby"),
            warmup_tasks=_tasks_with_role(d, "warmup"))
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
                 age: Mapping[str, int], stale: Mapping[str, bool]) -> TaskStatus:
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
        if active.stale:
            state = STALE
            notes.append(f"owner {doc.instance_id} last published {_age_text(age[doc.instance_id])} ago "
                         f"(stale; reported {task.state})")
        else:
            state = task.state
        if task.state == "restoring":
            restoration = _restoration(task.changelogs, notes)
        for other_doc, other in ranked[1:]:
            flag = " (stale)" if stale[other_doc.instance_id] else ""
            notes.append(f"also claimed active by {other_doc.instance_id}{flag} ({other.state})")
    partitions = sorted({c.topic_partition for _, t in claims for c in t.changelogs})
    standbys = tuple(
        _standby(doc, task, partitions, ends, stale[doc.instance_id], notes)
        for doc, task in sorted(((d, t) for d, t in claims if t.role != "active"),
                                key=lambda c: (c[1].role, c[0].instance_id)))
    return TaskStatus(task_id, state, active, restoration, standbys, tuple(notes))


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
        lag += max(0, end - entry.current_offset)
    if basis == "reported":
        notes.append(f"lag of {doc.instance_id} measured against its last reported end (live end unavailable)")
    if is_stale:
        notes.append(f"{task.role} {doc.instance_id} is stale")
    return StandbyReplica(doc.instance_id, doc.host, task.role == "warmup", task.state, lag, basis, is_stale)


# ---------------------------------------------------------------------------- rendering


def _age_text(ms: int) -> str:
    return _duration_text(ms / 1000)


def _duration_text(seconds: float) -> str:
    total = int(round(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _rate_text(rate: float) -> str:
    return f"{rate:,.0f}/s" if rate >= 10 else f"{rate:.1f}/s"


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
    if r.pending:
        progress = f"{r.restored:,}/? (pending)"
        eta = "?"
    else:
        progress = f"{r.restored:,}/{r.total:,} ({int(r.fraction * 100)}%)"
        eta = "?" if r.eta_seconds is None else _duration_text(r.eta_seconds)
    if bar:
        progress = f"{progress_bar(r.fraction)} {progress}"
    return progress, _rate_text(r.rate), eta


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
    lines = [f"application {status.application_id}: {len(status.instances)} instance(s)"
             f"{f' ({len(stale)} stale)' if stale else ''}, {len(status.tasks)} task(s) "
             f"({len(status.restoring_tasks)} restoring, {len(status.unassigned_tasks)} unassigned); "
             f"stale after {_age_text(status.stale_after_ms)}"]
    lines += _columns(header, rows)
    lines.append("")
    inst_header = ("INSTANCE", "HOST", "PID", "EPOCH", "STATE", "GENERATION", "PUBLISHED", "TASKS (A/S/W)")
    inst_rows = [(i.instance_id, i.host, str(i.pid), str(i.epoch), i.state,
                  "-" if i.generation is None else str(i.generation),
                  f"{_age_text(i.age_ms)} ago" + (" STALE" if i.stale else ""),
                  f"{len(i.active_tasks)}/{len(i.standby_tasks)}/{len(i.warmup_tasks)}")
                 for i in status.instances]
    lines += _columns(inst_header, inst_rows)
    if stale:
        lines.append("")
        lines.append(f"STALE INSTANCES (no document for more than {_age_text(status.stale_after_ms)}; "
                     f"their tasks are not trusted):")
        for i in stale:
            lines.append(f"  {i.instance_id}@{i.host} pid {i.pid} epoch {i.epoch} state {i.state}, "
                         f"last published {_age_text(i.age_ms)} ago")
    return "\n".join(lines)


def _columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = []
    for row in [header, *rows]:
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return out
