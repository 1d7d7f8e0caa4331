"""The status topic's document: what one instance says about itself.

Every instance publishes an :class:`InstanceStatus` document, keyed by its instance id, to
the compacted topic ``<application_id>-status`` (see docs/status-topic.md). This module is
its format: the fields, the version rule and a strict parser that names the bad field.
Readers turn the documents into an application snapshot (:mod:`.application`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal, overload

from airflow_stateful_provider.streams.errors import StatusFormatError, UnsupportedStatusVersionError
from airflow_stateful_provider.streams.status.document_parts import (
    RESTORE_SOURCES,
    ChangelogProgress,
    CommandAcknowledgement,
    HostApplication,
    InputPartition,
    InstanceTask,
    LostChangelogReport,
    SnapshotReport,
    TaskRestore,
    ThreadReport,
)
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = [
    "STATUS_FORMAT_VERSION",
    "STATE_LOST",
    "DEFAULT_STATUS_INTERVAL_MS",
    "DEFAULT_STALE_AFTER_MS",
    "INSTANCE_STATES",
    "TASK_ROLES",
    "TASK_STATES",
    "AT_LEAST_ONCE",
    "PROCESSING_GUARANTEES",
    "STALE",
    "UNASSIGNED",
    "document_format_version",
    "status_topic_name",
    "control_topic_name",
    "InstanceStatus",
]

#: Newest version of the document this code reads and writes. Readers accept this and older
#: versions and reject newer ones (a newer writer may have changed a field's meaning). A writer
#: stamps the oldest version that expresses its document: 2 only when a task is
#: ``state_lost`` (the value version 2 added), so readers of version 1 keep reading the rest.
STATUS_FORMAT_VERSION = 2
#: How often an instance republishes its document when nothing changes.
DEFAULT_STATUS_INTERVAL_MS = 10_000
#: A document older than this is stale: three missed publications.
DEFAULT_STALE_AFTER_MS = 3 * DEFAULT_STATUS_INTERVAL_MS

#: KafkaStreams instance states (kafka_streams.KafkaStreamsState values).
INSTANCE_STATES = frozenset({"CREATED", "REBALANCING", "RUNNING", "PENDING_SHUTDOWN", "NOT_RUNNING",
                             "PENDING_ERROR", "ERROR"})
TASK_ROLES = ("active", "standby", "warmup")
#: A task refused because its changelog lost what its stores hold (format version 2).
STATE_LOST = "state_lost"
TASK_STATES = ("created", "restoring", "running", "suspended", STATE_LOST)
#: The values of an instance's ``processing_guarantee`` (StreamsConfig.processing_guarantee).
AT_LEAST_ONCE = "at_least_once"
PROCESSING_GUARANTEES = (AT_LEAST_ONCE, "exactly_once_v2")

#: Task states of the snapshot beyond TASK_STATES.
STALE = "stale"
UNASSIGNED = "unassigned"


def status_topic_name(application_id: str) -> str:
    """``<application_id>-status``: compacted, one partition, one document per instance."""
    return f"{application_id}-status"


def control_topic_name(application_id: str) -> str:
    """``<application_id>-control``: commands to the instances (delete policy, one partition)."""
    return f"{application_id}-control"


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
    #: "at_least_once" or "exactly_once_v2"; documents of earlier builds lack it
    #: (they ran at-least-once).
    processing_guarantee: str = AT_LEAST_ONCE
    next_probing_rebalance_ms: int | None = None
    tasks: tuple[InstanceTask, ...] = ()
    acknowledgements: tuple[CommandAcknowledgement, ...] = ()
    #: Optional (earlier builds leave them out): thread metrics, the hosting application,
    #: and the address of the instance's own metrics endpoint (StreamsConfig.metrics_port).
    threads: tuple[ThreadReport, ...] = ()
    host_application: HostApplication | None = None
    metrics_endpoint: str | None = None

    @property
    def format_version(self) -> int:
        """The version this document is written with (see STATUS_FORMAT_VERSION)."""
        return document_format_version(t.state for t in self.tasks)

    def to_dict(self) -> dict[str, Any]:
        optional: dict[str, Any] = {}
        if self.threads:
            optional["threads"] = [t.to_dict() for t in self.threads]
        if self.host_application is not None:
            optional["host_application"] = self.host_application.to_dict()
        if self.metrics_endpoint is not None:
            optional["metrics_endpoint"] = self.metrics_endpoint
        return optional | {
            "format_version": self.format_version,
            "instance_id": self.instance_id,
            "application_id": self.application_id,
            "state": self.state,
            "epoch": self.epoch,
            "host": self.host,
            "pid": self.pid,
            "process_id": self.process_id,
            "processing_guarantee": self.processing_guarantee,
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


def document_format_version(task_states: Iterable[str]) -> int:
    """The oldest format version expressing a document whose tasks are in ``task_states``."""
    return 2 if STATE_LOST in task_states else 1


class _DocumentParser:
    """Parses one document; knows the instance key so every error can name it."""

    def __init__(self, data: Any, key: str | None) -> None:
        self.data = data
        self.key = key
        self.version = 1

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

    @overload
    def integer(self, obj: Mapping[str, Any], name: str, path: str, *, minimum: int | None = 0,
                nullable: Literal[False] = False) -> int: ...

    @overload
    def integer(self, obj: Mapping[str, Any], name: str, path: str, *, minimum: int | None = 0,
                nullable: bool) -> int | None: ...

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

    @overload
    def rate(self, obj: Mapping[str, Any], name: str, path: str, *, nullable: Literal[False] = False) -> float: ...

    @overload
    def rate(self, obj: Mapping[str, Any], name: str, path: str, *, nullable: bool) -> float | None: ...

    def rate(self, obj: Mapping[str, Any], name: str, path: str, *, nullable: bool = False) -> float | None:
        value = self.field(obj, name, path)
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise self.fail(path, f"must be a finite number >= 0{' or null' if nullable else ''}, got {value!r}")
        return float(value)

    def optional_text(self, obj: Mapping[str, Any], name: str, path: str) -> str | None:
        value = obj.get(name)
        if value is not None and (not isinstance(value, str) or not value):
            raise self.fail(path, f"must be a non-empty string or null, got {value!r}")
        return value

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
        self.version = version
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
            processing_guarantee=self.text(data, "processing_guarantee", "processing_guarantee",
                                           choices=PROCESSING_GUARANTEES)
            if "processing_guarantee" in data else AT_LEAST_ONCE,
            generation=self.integer(data, "generation", "generation", minimum=None, nullable=True),
            next_probing_rebalance_ms=self.integer(data, "next_probing_rebalance_ms", "next_probing_rebalance_ms",
                                                   nullable=True),
            published_at=self.integer(data, "published_at", "published_at"),
            tasks=tasks,
            acknowledgements=acks,
            threads=tuple(self.thread(t, f"threads[{i}]")
                          for i, t in enumerate(self.listing(data, "threads", "threads")))
            if "threads" in data else (),
            host_application=self.host_application(data["host_application"], "host_application")
            if data.get("host_application") is not None else None,
            metrics_endpoint=self.optional_text(data, "metrics_endpoint", "metrics_endpoint"),
        )

    def thread(self, raw: Any, path: str) -> ThreadReport:
        obj = self.mapping(raw, path)
        def count(name: str) -> int:
            return self.integer(obj, name, f"{path}.{name}")

        def sample(name: str) -> float | None:
            return self.rate(obj, name, f"{path}.{name}", nullable=True)

        return ThreadReport(thread_id=self.text(obj, "thread_id", f"{path}.thread_id"),
                            process_total=count("process_total"),
                            process_rate=self.rate(obj, "process_rate", f"{path}.process_rate"),
                            commit_total=count("commit_total"),
                            commit_latency_avg=sample("commit_latency_avg"),
                            commit_latency_max=sample("commit_latency_max"),
                            poll_records_avg=sample("poll_records_avg"),
                            poll_records_max=sample("poll_records_max"),
                            records_lag_max=self.integer(obj, "records_lag_max", f"{path}.records_lag_max",
                                                         nullable=True),
                            transaction_aborts_total=count("transaction_aborts_total"),
                            blocked_in=self.optional_text(obj, "blocked_in", f"{path}.blocked_in"),
                            blocked_on=self.optional_text(obj, "blocked_on", f"{path}.blocked_on"),
                            blocked_ms=self.integer(obj, "blocked_ms", f"{path}.blocked_ms", nullable=True)
                            if "blocked_ms" in obj else None,
                            unprocessed_ms=self.integer(obj, "unprocessed_ms", f"{path}.unprocessed_ms", nullable=True)
                            if "unprocessed_ms" in obj else None)

    def host_application(self, raw: Any, path: str) -> HostApplication:
        obj = self.mapping(raw, path)
        return HostApplication(kind=self.text(obj, "kind", f"{path}.kind"),
                               application_id=self.text(obj, "application_id", f"{path}.application_id"),
                               ui_url=self.optional_text(obj, "ui_url", f"{path}.ui_url"))

    def task(self, raw: Any, path: str) -> InstanceTask:
        obj = self.mapping(raw, path)
        task_id = self.text(obj, "task_id", f"{path}.task_id")
        try:
            TaskId.parse(task_id)
        except ValueError as exc:
            raise self.fail(f"{path}.task_id", str(exc)) from None
        changelogs = tuple(self.changelog(c, f"{path}.changelogs[{i}]")
                           for i, c in enumerate(self.listing(obj, "changelogs", f"{path}.changelogs")))
        restore = self.restore(obj["restore"], f"{path}.restore") if obj.get("restore") is not None else None
        state = self.text(obj, "state", f"{path}.state", choices=TASK_STATES)
        if state == STATE_LOST and self.version < 2:
            raise self.fail(f"{path}.state", f"is {STATE_LOST!r}, which format_version {self.version} does not have "
                                             f"(it came with version 2)")
        lost = tuple(self.lost_changelog(c, f"{path}.lost_changelogs[{i}]")
                     for i, c in enumerate(self.listing(obj, "lost_changelogs", f"{path}.lost_changelogs")))\
            if "lost_changelogs" in obj else ()
        dropped = self.mapping(obj["dropped_records"], f"{path}.dropped_records") if "dropped_records" in obj else {}
        dropped = {str(reason): self.integer(dropped, reason, f"{path}.dropped_records.{reason}")
                   for reason in dropped}
        inputs = tuple(self.input_partition(p, f"{path}.input_partitions[{i}]") for i, p in
                       enumerate(self.listing(obj, "input_partitions", f"{path}.input_partitions")))\
            if "input_partitions" in obj else ()
        snapshot = self.mapping(obj["last_snapshot"], f"{path}.last_snapshot") \
            if obj.get("last_snapshot") is not None else None
        return InstanceTask(
            task_id, self.text(obj, "role", f"{path}.role", choices=TASK_ROLES), state, changelogs, restore, lost,
            dropped,
            process_total=self.integer(obj, "process_total", f"{path}.process_total") if "process_total" in obj
            else None,
            process_rate=self.rate(obj, "process_rate", f"{path}.process_rate") if "process_rate" in obj else None,
            input_partitions=inputs,
            last_snapshot=None if snapshot is None else SnapshotReport(
                self.text(snapshot, "snapshot_id", f"{path}.last_snapshot.snapshot_id"),
                self.integer(snapshot, "taken_at", f"{path}.last_snapshot.taken_at")))

    def input_partition(self, raw: Any, path: str) -> InputPartition:
        obj = self.mapping(raw, path)
        return InputPartition(topic=self.text(obj, "topic", f"{path}.topic"),
                              partition=self.integer(obj, "partition", f"{path}.partition"),
                              position=self.integer(obj, "position", f"{path}.position", nullable=True),
                              end_offset=self.integer(obj, "end_offset", f"{path}.end_offset", nullable=True))

    def lost_changelog(self, raw: Any, path: str) -> LostChangelogReport:
        obj = self.mapping(raw, path)
        return LostChangelogReport(
            topic=self.text(obj, "topic", f"{path}.topic"),
            partition=self.integer(obj, "partition", f"{path}.partition"),
            store=self.text(obj, "store", f"{path}.store"),
            checkpointed_offset=self.integer(obj, "checkpointed_offset", f"{path}.checkpointed_offset"),
            log_start_offset=self.integer(obj, "log_start_offset", f"{path}.log_start_offset"),
            log_end_offset=self.integer(obj, "log_end_offset", f"{path}.log_end_offset"),
        )

    def restore(self, raw: Any, path: str) -> TaskRestore:
        obj = self.mapping(raw, path)
        snapshot_id = self.field(obj, "snapshot_id", f"{path}.snapshot_id")
        if snapshot_id is not None and (not isinstance(snapshot_id, str) or not snapshot_id):
            raise self.fail(f"{path}.snapshot_id", f"must be a non-empty string or null, got {snapshot_id!r}")
        skipped = self.listing(obj, "skipped", f"{path}.skipped")
        if not all(isinstance(reason, str) for reason in skipped):
            raise self.fail(f"{path}.skipped", "must be a list of strings")
        return TaskRestore(
            source=self.text(obj, "source", f"{path}.source", choices=RESTORE_SOURCES),
            changelog_records=self.integer(obj, "changelog_records", f"{path}.changelog_records"),
            snapshot_id=snapshot_id,
            snapshot_taken_at=self.integer(obj, "snapshot_taken_at", f"{path}.snapshot_taken_at", nullable=True),
            snapshot_offsets=self.integer(obj, "snapshot_offsets", f"{path}.snapshot_offsets"),
            skipped=tuple(skipped),
        )

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
