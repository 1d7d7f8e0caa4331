"""AssignmentInfo: what the group leader tells each stream thread besides its partitions.

Why: the consumer protocol only carries partitions, but a stream thread runs *tasks* in
three roles. It needs its active tasks (and which of its partitions belong to which), its
standby tasks with their changelog partitions (standbys own no input partitions), which
standbys are warmups (placed to prepare a move, dropped once it happened), where every
other task runs (endpoint -> partitions, for interactive queries and status), when to
trigger the next rebalance (a probing rebalance once warmups may have caught up, or at
once to finish a cooperative move), and an error code. Kafka Streams' ``AssignmentInfo``
has the same role; we also list warmups explicitly (its consumers infer nothing about them).

It travels as the ``user_data`` of the consumer protocol's assignment; the byte layout of
each version is in docs/group-protocol.md.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from types import MappingProxyType

from kafka.structs import TopicPartition

from airflow_stateful_provider.streams.assignment.group_protocol import (
    LATEST_SUPPORTED_VERSION,
    ProtocolReader,
    ProtocolWriter,
    decode_message,
    encode_message,
)
from airflow_stateful_provider.streams.errors import GroupProtocolError
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = ["NO_FOLLOWUP_REBALANCE", "REBALANCE_IMMEDIATELY", "AssignmentInfo", "AssignorError"]

#: ``next_rebalance_ms`` when no follow-up rebalance is needed.
NO_FOLLOWUP_REBALANCE = -1
#: ``next_rebalance_ms`` asking for a rebalance right away (to complete a cooperative move,
#: or after version probing): any time in the past triggers at once.
REBALANCE_IMMEDIATELY = 0


class AssignorError(enum.IntEnum):
    """Error codes carried by subscriptions and assignments (Kafka Streams' ``AssignorError``).

    - ``INCOMPLETE_SOURCE_TOPIC_METADATA``: the leader did not know the partitions of a source
      topic; nothing is assigned. The leader watches the topics, so a rebalance follows once
      their metadata arrives; a topic that really does not exist stays an error.
    - ``VERSION_PROBING``: the member subscribed with a version the leader cannot read; it
      gets nothing and should rejoin at once using ``latest_supported_version``.
    - ``ASSIGNMENT_ERROR``: the leader could not assign (e.g. source topics not co-partitioned,
      unreadable subscription); nothing is assigned and the thread should fail.
    - ``SHUTDOWN_REQUESTED``: a member asked the whole application to shut down.
    """

    NONE = 0
    INCOMPLETE_SOURCE_TOPIC_METADATA = 1
    VERSION_PROBING = 2
    ASSIGNMENT_ERROR = 3
    SHUTDOWN_REQUESTED = 4


def _task_partitions(field: str, value: object) -> Mapping[TaskId, frozenset[TopicPartition]]:
    if not isinstance(value, Mapping):
        raise GroupProtocolError(f"{field} must map TaskId to partitions, got {type(value).__name__} {value!r}")
    result: dict[TaskId, frozenset[TopicPartition]] = {}
    for task, partitions in value.items():
        if not isinstance(task, TaskId):
            raise GroupProtocolError(f"{field} keys must be TaskId, got {type(task).__name__} {task!r}")
        result[task] = _partition_set(f"{field}[{task}]", partitions)
    return MappingProxyType(result)


def _partition_set(field: str, value: object) -> frozenset[TopicPartition]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise GroupProtocolError(f"{field} must be a collection of TopicPartition, got {value!r}")
    result = set()
    for tp in value:
        if (not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) or not tp[0]
                or isinstance(tp[1], bool) or not isinstance(tp[1], int) or tp[1] < 0):
            raise GroupProtocolError(f"{field} must hold TopicPartition(topic, partition >= 0), got {tp!r}")
        result.add(TopicPartition(tp[0], tp[1]))
    return frozenset(result)


@dataclasses.dataclass(frozen=True, slots=True)
class AssignmentInfo:
    """One member's assignment data.

    - ``active_tasks``: task -> the input partitions of that task this member now owns (the
      consumer protocol's partition list is exactly their union).
    - ``standby_tasks``: task -> its changelog partitions (what a standby replays); includes
      the warmups. ``warmup_tasks``: which standbys are warmups.
    - ``partitions_by_host`` / ``standby_partitions_by_host``: endpoint -> input partitions of
      the tasks the instances at that endpoint run as active / standby (instances without an
      endpoint are not listed).
    - ``next_rebalance_ms``: wall-clock epoch ms at which this member should trigger a
      rebalance (``-1`` none, ``0`` at once).
    - ``error_code``: an :class:`AssignorError` value.
    - ``version``: the version the data is encoded in (the oldest any member uses);
      ``latest_supported_version``: the newest every member of the group supports.
    """

    active_tasks: Mapping[TaskId, frozenset[TopicPartition]] = dataclasses.field(default_factory=dict, hash=False)
    standby_tasks: Mapping[TaskId, frozenset[TopicPartition]] = dataclasses.field(default_factory=dict, hash=False)
    warmup_tasks: frozenset[TaskId] = frozenset()
    partitions_by_host: Mapping[str, frozenset[TopicPartition]] = dataclasses.field(
        default_factory=dict, hash=False)
    standby_partitions_by_host: Mapping[str, frozenset[TopicPartition]] = dataclasses.field(
        default_factory=dict, hash=False)
    next_rebalance_ms: int = NO_FOLLOWUP_REBALANCE
    error_code: int = AssignorError.NONE
    version: int = LATEST_SUPPORTED_VERSION
    latest_supported_version: int = LATEST_SUPPORTED_VERSION

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "active_tasks", _task_partitions("active_tasks", self.active_tasks))
        set_(self, "standby_tasks", _task_partitions("standby_tasks", self.standby_tasks))
        both = set(self.active_tasks) & set(self.standby_tasks)
        if both:
            raise GroupProtocolError(
                f"tasks cannot be both active and standby: {[str(t) for t in sorted(both)]}"
            )
        if isinstance(self.warmup_tasks, (str, bytes)) or not hasattr(self.warmup_tasks, "__iter__"):
            raise GroupProtocolError(f"warmup_tasks must be a collection of TaskId, got {self.warmup_tasks!r}")
        warmups = frozenset(self.warmup_tasks)
        stray = warmups - set(self.standby_tasks)
        if stray:
            raise GroupProtocolError(
                f"warmup_tasks must be standby tasks too; not standbys: {[str(t) for t in sorted(stray)]}"
            )
        set_(self, "warmup_tasks", warmups)
        for field in ("partitions_by_host", "standby_partitions_by_host"):
            value = getattr(self, field)
            if not isinstance(value, Mapping):
                raise GroupProtocolError(f"{field} must map endpoints to partitions, got {value!r}")
            hosts: dict[str, frozenset[TopicPartition]] = {}
            for host, partitions in value.items():
                if not isinstance(host, str) or not host:
                    raise GroupProtocolError(f"{field} keys must be non-empty 'host:port' strings, got {host!r}")
                hosts[host] = _partition_set(f"{field}[{host!r}]", partitions)
            set_(self, field, MappingProxyType(hosts))
        for field, value, low, high in (("next_rebalance_ms", self.next_rebalance_ms, -1, 2**63 - 1),
                                        ("error_code", self.error_code, -(2**31), 2**31 - 1),
                                        ("version", self.version, 1, 2**31 - 1),
                                        ("latest_supported_version", self.latest_supported_version, 1, 2**31 - 1)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise GroupProtocolError(f"{field} must be an int in [{low}, {high}], got {value!r}")

    # ------------------------------------------------------------------ views

    @property
    def active_partitions(self) -> frozenset[TopicPartition]:
        """The input partitions of all active tasks (what the consumer is assigned)."""
        return frozenset(tp for parts in self.active_tasks.values() for tp in parts)

    @property
    def hot_standby_tasks(self) -> frozenset[TaskId]:
        """Standbys that are not warmups (the ``num_standby_replicas`` copies)."""
        return frozenset(self.standby_tasks) - self.warmup_tasks

    @property
    def followup_rebalance_requested(self) -> bool:
        return self.next_rebalance_ms != NO_FOLLOWUP_REBALANCE

    @property
    def error(self) -> AssignorError | int:
        """``error_code`` as an :class:`AssignorError` when known (a newer leader may send others)."""
        try:
            return AssignorError(self.error_code)
        except ValueError:
            return self.error_code

    # ------------------------------------------------------------------ codec

    def encode(self) -> bytes:
        """The bytes of :attr:`version` (which must be one this build can write)."""
        return encode_message(self, _ENCODERS)

    @classmethod
    def decode(cls, data: bytes) -> AssignmentInfo:
        """Decode any version this build knows; a newer one raises
        :class:`~airflow_stateful_provider.streams.errors.UnsupportedGroupProtocolVersionError`
        naming both versions, garbage raises :class:`GroupProtocolError`."""
        return decode_message(data, "assignment data", _DECODERS)


def _encode_v1(info: AssignmentInfo, w: ProtocolWriter) -> None:
    topics = sorted({
        tp.topic
        for group in (info.active_tasks, info.standby_tasks, info.partitions_by_host, info.standby_partitions_by_host)
        for parts in group.values()
        for tp in parts
    })
    index = {topic: i for i, topic in enumerate(topics)}
    w.count("topic count", len(topics))
    for topic in topics:
        w.string("topic", topic)
    for field in ("active_tasks", "standby_tasks"):
        tasks: Mapping[TaskId, frozenset[TopicPartition]] = getattr(info, field)
        w.count(f"{field} count", len(tasks))
        for task in sorted(tasks):
            w.i32(f"{field} subtopology", task.subtopology)
            w.i32(f"{field} partition", task.partition)
            w.partitions(f"{field}[{task}] partitions", tasks[task], index)
    w.task_set("warmup_tasks", info.warmup_tasks)
    for field in ("partitions_by_host", "standby_partitions_by_host"):
        hosts: Mapping[str, frozenset[TopicPartition]] = getattr(info, field)
        w.count(f"{field} count", len(hosts))
        for host in sorted(hosts):
            w.string(f"{field} host", host)
            w.partitions(f"{field}[{host!r}]", hosts[host], index)
    w.i64("next_rebalance_ms", info.next_rebalance_ms)
    w.i32("error_code", info.error_code)


def _decode_v1(r: ProtocolReader, used: int, latest: int) -> AssignmentInfo:
    topics = [r.string("topic") for _ in range(r.count("topic count"))]
    task_maps = []
    for field in ("active_tasks", "standby_tasks"):
        tasks = {}
        for _ in range(r.count(f"{field} count")):
            task = r.task_id(field, r.i32(f"{field} subtopology"), r.i32(f"{field} partition"))
            tasks[task] = r.partitions(f"{field}[{task}] partitions", topics)
        task_maps.append(tasks)
    warmups = r.task_set("warmup_tasks")
    host_maps = []
    for field in ("partitions_by_host", "standby_partitions_by_host"):
        hosts = {}
        for _ in range(r.count(f"{field} count")):
            host = r.string(f"{field} host")
            hosts[host] = r.partitions(f"{field}[{host!r}]", topics)
        host_maps.append(hosts)
    next_rebalance_ms = r.i64("next_rebalance_ms")
    error_code = r.i32("error_code")
    try:
        return AssignmentInfo(task_maps[0], task_maps[1], warmups, host_maps[0], host_maps[1],
                              next_rebalance_ms, error_code, version=used, latest_supported_version=latest)
    except GroupProtocolError as exc:
        raise r.error(str(exc)) from None


#: Version -> encoder / decoder (see subscription_info for how to add a version).
_ENCODERS: dict[int, Callable[[AssignmentInfo, ProtocolWriter], None]] = {1: _encode_v1}
_DECODERS: dict[int, Callable[[ProtocolReader, int, int], AssignmentInfo]] = {1: _decode_v1}
