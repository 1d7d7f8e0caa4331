"""What the status collector reads of a running instance: typed views of ``KafkaStreams``,
its stream threads, their active tasks and standbys, and their changelog reader.

The status package sits below the runtime that owns these objects (instance/, restoration/,
processing/) and must not import it (tests/unit/test_layers.py). So the collector states
here what it needs, and the runtime's classes provide it: KafkaStreams (:class:`InstanceView`),
StreamThread (:class:`StreamThreadView`), StreamTask (:class:`ActiveTaskView`), StandbyTask
(:class:`StandbyView`), ChangelogReader (:class:`ChangelogReaderView`) with its
ChangelogState, LostChangelog and RestoreSource entries. A type checker checks that where the
instance hands itself to the status publisher (:class:`PublishedInstanceView`);
tests/unit/test_status_instance_view.py checks that the runtime's objects have every member
named here.

Members are read-only properties: the collector never writes, and a read-only member lets an
implementation narrow its type (a ``TaskState`` where an ``Enum`` is asked for).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from airflow_stateful_provider.streams.task_id import TaskId

__all__ = [
    "ActiveTaskView",
    "ChangelogProgressView",
    "ChangelogReaderView",
    "GroupConsumerView",
    "GroupMetadataView",
    "InstanceConfigView",
    "InstanceView",
    "LostChangelogView",
    "PublishedConfigView",
    "PublishedInstanceView",
    "RestoreSourceView",
    "StandbyView",
    "SnapshotTakerView",
    "StreamThreadView",
    "TaskMetricsView",
    "ThreadMetricsView",
    "TopicPartitionView",
    "WindowedStatView",
]


@runtime_checkable
class TaskMetricsView(Protocol):
    @property
    def dropped_records(self) -> Mapping[str, int]:
        """Records a processor skipped, by reason."""

    @property
    def process_total(self) -> int:
        """Records the task processed since it started on this instance."""


@runtime_checkable
class TopicPartitionView(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


@runtime_checkable
class ActiveTaskView(Protocol):
    """An active task (processing/task.py ``StreamTask``)."""

    @property
    def state(self) -> enum.Enum:
        """Its lifecycle state; the value's lower case is the document's task state."""

    @property
    def metrics(self) -> TaskMetricsView: ...

    @property
    def partitions(self) -> Sequence[TopicPartitionView]:
        """Its input partitions."""


@runtime_checkable
class StandbyView(Protocol):
    """A standby or warmup task (restoration/standby_task.py ``StandbyTask``)."""

    @property
    def id(self) -> TaskId: ...

    @property
    def state(self) -> enum.Enum: ...

    @property
    def warmup(self) -> bool:
        """Placed to take the task over once caught up (reported as role ``warmup``)."""


@runtime_checkable
class ChangelogProgressView(Protocol):
    """How far one changelog partition of a registered task is applied (``ChangelogState``)."""

    @property
    def partition(self) -> tuple[str, int]: ...

    @property
    def task_id(self) -> TaskId: ...

    @property
    def store_name(self) -> str: ...

    @property
    def start_offset(self) -> int: ...

    @property
    def position(self) -> int:
        """Next offset to read."""

    @property
    def end_offset(self) -> int | None: ...


@runtime_checkable
class LostChangelogView(Protocol):
    """A changelog partition that lost what its store holds (restoration/changelog_loss.py)."""

    @property
    def role(self) -> str:
        """``"active"`` or ``"standby"``."""

    def to_dict(self) -> dict[str, Any]:
        """The document's ``tasks[].lost_changelogs[]`` entry."""


@runtime_checkable
class RestoreSourceView(Protocol):
    """Where a task's state came from (restoration/restore_source.py ``RestoreSource``)."""

    def as_dict(self) -> dict[str, Any]:
        """The document's ``tasks[].restore`` entry."""


@runtime_checkable
class ChangelogReaderView(Protocol):
    """A stream thread's restoration and standby updates (restoration/changelog_reader.py)."""

    def progress(self) -> Sequence[ChangelogProgressView]: ...

    @property
    def restore_sources(self) -> Mapping[TaskId, RestoreSourceView]: ...

    @property
    def lost_tasks(self) -> Mapping[TaskId, Sequence[LostChangelogView]]: ...


@runtime_checkable
class GroupMetadataView(Protocol):
    @property
    def generation_id(self) -> int: ...


@runtime_checkable
class GroupConsumerView(Protocol):
    """The thread's main consumer: its group generation."""

    def group_metadata(self) -> GroupMetadataView: ...


@runtime_checkable
class WindowedStatView(Protocol):
    def avg_max(self) -> tuple[float | None, float | None]:
        """Average and maximum over the recent window (None, None when empty)."""


@runtime_checkable
class ThreadMetricsView(Protocol):
    """A stream thread's metrics (processing/metrics.py ``ThreadMetrics``)."""

    @property
    def process_total(self) -> int: ...

    @property
    def commit_total(self) -> int: ...

    @property
    def transaction_aborts_total(self) -> int: ...

    @property
    def processed_at(self) -> float | None:
        """time.time() of the last iteration that processed records."""

    @property
    def commit_latency(self) -> WindowedStatView: ...

    @property
    def poll_records(self) -> WindowedStatView: ...


@runtime_checkable
class SnapshotTakerView(Protocol):
    """A stream thread's snapshot taker (snapshots/taking.py ``SnapshotTaker``)."""

    @property
    def last_uploaded(self) -> Mapping[str, tuple[str, int]]:
        """Newest uploaded snapshot per task id: (snapshot id, taken at epoch ms)."""


@runtime_checkable
class StreamThreadView(Protocol):
    """A stream thread (instance/stream_thread.py ``StreamThread``). Its tasks, standbys and
    the reader's registrations change under ``tasks_lock``: the collector reads them holding it."""

    @property
    def tasks(self) -> Mapping[TaskId, ActiveTaskView]: ...

    @property
    def standby_tasks(self) -> Mapping[TaskId, StandbyView]: ...

    @property
    def tasks_lock(self) -> AbstractContextManager[Any]: ...

    @property
    def changelog_reader(self) -> ChangelogReaderView | None:
        """None until the thread started."""

    @property
    def consumer(self) -> GroupConsumerView | None:
        """None until the thread started."""

    @property
    def next_probing_rebalance_ms(self) -> int | None:
        """When the assignor asked this member to rebalance next (wall clock), if it did."""

    @property
    def name(self) -> str:
        """The thread id (``<client id>-StreamThread-<n>``)."""

    @property
    def metrics(self) -> ThreadMetricsView: ...

    @property
    def snapshot_taker(self) -> SnapshotTakerView | None:
        """None when snapshots are off or the thread has not started."""

    @property
    def kafka_waits(self) -> KafkaWaitsView:
        """The Kafka call the thread waits in now (processing/kafka_waits.py)."""


@runtime_checkable
class KafkaWaitView(Protocol):
    """One Kafka call a thread waits in (processing/kafka_waits.py ``KafkaWait``)."""

    @property
    def call(self) -> str: ...

    @property
    def waiting_for(self) -> str: ...

    @property
    def since_ms(self) -> int: ...


@runtime_checkable
class KafkaWaitsView(Protocol):
    @property
    def current(self) -> KafkaWaitView | None: ...


@runtime_checkable
class InstanceConfigView(Protocol):
    @property
    def application_id(self) -> str: ...

    @property
    def processing_guarantee(self) -> enum.Enum | str: ...

    @property
    def host_application(self) -> Mapping[str, Any] | None:
        """What hosts the instance (the document's ``host_application``), if set."""


@runtime_checkable
class InstanceView(Protocol):
    """A ``KafkaStreams`` instance (instance/kafka_streams.py)."""

    @property
    def state(self) -> enum.Enum: ...

    @property
    def config(self) -> InstanceConfigView: ...

    @property
    def process_id(self) -> uuid.UUID: ...

    @property
    def threads(self) -> Sequence[StreamThreadView]: ...

    @property
    def metrics_endpoint(self) -> str | None:
        """URL of the instance's own metrics endpoint, when it serves one."""


@runtime_checkable
class PublishedConfigView(InstanceConfigView, Protocol):
    """What the status publisher reads of the instance's config besides the collector's."""

    @property
    def bootstrap_servers(self) -> str | Sequence[str]: ...

    @property
    def client_configs(self) -> Mapping[str, Any]: ...

    @property
    def producer_configs(self) -> Mapping[str, Any]: ...

    @property
    def status_interval_ms(self) -> int | timedelta: ...


@runtime_checkable
class PublishedInstanceView(InstanceView, Protocol):
    """A ``KafkaStreams`` instance publishing its status (status/publisher.py ``for_instance``)."""

    @property
    def config(self) -> PublishedConfigView: ...
