"""The parts of an instance's status document (document.py): its tasks with their
restoration and input partitions, its stream threads' metrics, the control commands it
acknowledged, the Spark application hosting it. Plain values with their JSON form; the
document's parser (document.py) builds them and checks every field."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ChangelogProgress",
    "RESTORE_SOURCES",
    "TaskRestore",
    "LostChangelogReport",
    "InputPartition",
    "SnapshotReport",
    "InstanceTask",
    "CommandAcknowledgement",
    "ThreadReport",
    "HostApplication",
]


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


#: Where a task's state came from at its assignment (docs/snapshots.md).
RESTORE_SOURCES = ("local", "snapshot", "changelog")


@dataclasses.dataclass(frozen=True)
class TaskRestore:
    """Where a task's state came from when this instance got the task: ``local`` state,
    a ``snapshot`` (its id, when it was taken, the changelog offsets it covered) or the
    ``changelog`` alone; plus the changelog records restored on top, and why newer
    snapshots were skipped. Optional in the document (earlier builds leave it out)."""

    source: str
    changelog_records: int
    snapshot_id: str | None = None
    snapshot_taken_at: int | None = None
    snapshot_offsets: int = 0
    skipped: tuple[str, ...] = ()

    def snapshot_age_ms(self, now_ms: int) -> int | None:
        return None if self.snapshot_taken_at is None else max(0, now_ms - self.snapshot_taken_at)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "changelog_records": self.changelog_records, "snapshot_id": self.snapshot_id,
                "snapshot_taken_at": self.snapshot_taken_at, "snapshot_offsets": self.snapshot_offsets,
                "skipped": list(self.skipped)}


@dataclasses.dataclass(frozen=True)
class LostChangelogReport:
    """A changelog partition of a ``state_lost`` task: the store holds it up to
    ``checkpointed_offset``, but the changelog now starts at ``log_start_offset`` and ends at
    ``log_end_offset`` (docs/runbook.md, "A task's state is lost")."""

    topic: str
    partition: int
    store: str
    checkpointed_offset: int
    log_start_offset: int
    log_end_offset: int

    def describe(self) -> str:
        return (f"store {self.store!r} holds {self.topic}-{self.partition} up to offset {self.checkpointed_offset}, "
                f"the changelog now starts at {self.log_start_offset} and ends at {self.log_end_offset}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class InputPartition:
    """An input partition of an active task, as its main consumer knows it: ``position`` is
    the next offset it will fetch, ``end_offset`` the partition's high watermark from the
    last fetch response (None until the first); ``lag`` the records between them."""

    topic: str
    partition: int
    position: int | None
    end_offset: int | None

    @property
    def lag(self) -> int | None:
        if self.position is None or self.end_offset is None:
            return None
        return max(0, self.end_offset - self.position)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SnapshotReport:
    """The newest snapshot this instance uploaded of a task (docs/snapshots.md)."""

    snapshot_id: str
    taken_at: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class InstanceTask:
    """A task an instance holds: its role, its state and its changelog partitions.

    Running active tasks list no changelogs: their stores are current with their input. A
    ``state_lost`` task lists what its changelogs lost in ``lost_changelogs``. An active task
    that skipped records (exception handlers, invalid timestamps, late or null-key records)
    counts them by reason in ``dropped_records`` (since the task started on this instance).
    An active task also reports, optionally, the records it processed (``process_total``,
    ``process_rate`` per second) and its ``input_partitions``; a task this instance
    snapshotted, its ``last_snapshot``.
    """

    task_id: str
    role: str
    state: str
    changelogs: tuple[ChangelogProgress, ...] = ()
    restore: TaskRestore | None = None
    lost_changelogs: tuple[LostChangelogReport, ...] = ()
    dropped_records: Mapping[str, int] = dataclasses.field(default_factory=dict, hash=False)
    process_total: int | None = None
    process_rate: float | None = None
    input_partitions: tuple[InputPartition, ...] = ()
    last_snapshot: SnapshotReport | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"task_id": self.task_id, "role": self.role, "state": self.state,
               "changelogs": [c.to_dict() for c in self.changelogs]}
        if self.restore is not None:
            out["restore"] = self.restore.to_dict()
        if self.lost_changelogs:
            out["lost_changelogs"] = [c.to_dict() for c in self.lost_changelogs]
        if self.dropped_records:
            out["dropped_records"] = dict(sorted(self.dropped_records.items()))
        if self.process_total is not None:
            out["process_total"] = self.process_total
        if self.process_rate is not None:
            out["process_rate"] = self.process_rate
        if self.input_partitions:
            out["input_partitions"] = [p.to_dict() for p in self.input_partitions]
        if self.last_snapshot is not None:
            out["last_snapshot"] = self.last_snapshot.to_dict()
        return out


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
class ThreadReport:
    """One stream thread's metrics (Kafka Streams' ``stream-thread-metrics``, and its main
    consumer's ``records-lag-max``). Latencies in ms, rates per second; the averages and
    maxima cover the last 30 s and are None when nothing happened in them."""

    thread_id: str
    process_total: int
    process_rate: float
    commit_total: int
    commit_latency_avg: float | None
    commit_latency_max: float | None
    poll_records_avg: float | None
    poll_records_max: float | None
    #: The largest input lag of the thread's partitions as of the document (None: unknown).
    records_lag_max: int | None
    transaction_aborts_total: int
    #: The Kafka call the thread waits in as of the document, what it waits for and for how
    #: long (ms); None when it waits in none (processing/kafka_waits.py).
    blocked_in: str | None = None
    blocked_on: str | None = None
    blocked_ms: int | None = None
    #: While its input partitions hold records: ms since the thread last processed any.
    unprocessed_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class HostApplication:
    """What hosts the instance, when something does: e.g. the Spark application (``kind``
    "spark", its application id, its web UI address when the UI is enabled)."""

    kind: str
    application_id: str
    ui_url: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
