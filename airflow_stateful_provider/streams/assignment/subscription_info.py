"""SubscriptionInfo: what each stream thread's consumer tells the group leader when it joins.

Why these fields (Kafka Streams' ``SubscriptionInfo``): the leader assigns *tasks* to
*processes*, not partitions to consumers, so every member says which process it belongs to
(threads of one process share one state directory and count as one client with one thread
per member), which tasks it ran before (stickiness, cooperative revocation), how far its
local state of each task got (per-task changelog offset sums, from which the leader computes
lags against live end offsets, docs/semantics.md §3), its ``client_tag.*`` values (rack-aware
standbys) and its endpoint (so every instance learns which host serves which partitions).

It travels as the ``user_data`` of the consumer protocol's subscription; the byte layout of
each version is in docs/group-protocol.md.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from types import MappingProxyType

from airflow_stateful_provider.streams.assignment.group_protocol import (
    LATEST_SUPPORTED_VERSION,
    ProtocolReader,
    ProtocolWriter,
    decode_message,
    encode_message,
)
from airflow_stateful_provider.streams.assignment.lag import LATEST_OFFSET, UNKNOWN_OFFSET_SUM
from airflow_stateful_provider.streams.errors import GroupProtocolError
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = ["SubscriptionInfo", "check_endpoint"]


def check_endpoint(endpoint: object, field: str = "endpoint") -> str:
    """``""`` (no endpoint) or ``host:port`` with a port in 1..65535 (``[::1]:8080`` for IPv6),
    as Kafka Streams' ``application.server``."""
    if not isinstance(endpoint, str):
        raise GroupProtocolError(f"{field} must be a str 'host:port' or '', got {type(endpoint).__name__} {endpoint!r}")
    if endpoint == "":
        return endpoint
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535 or any(c.isspace() for c in endpoint):
        raise GroupProtocolError(f"{field} must look like 'host:port' (port 1..65535) or be '', got {endpoint!r}")
    return endpoint


def _task_set(field: str, value: object) -> frozenset[TaskId]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise GroupProtocolError(f"{field} must be a collection of TaskId, got {value!r}")
    tasks = frozenset(value)
    for task in tasks:
        if not isinstance(task, TaskId):
            raise GroupProtocolError(f"{field} must hold TaskId objects, got {type(task).__name__} {task!r}")
    return tasks


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """One member's subscription data.

    - ``process_id``: the instance (``KafkaStreams``) the member belongs to.
    - ``previous_active_tasks`` / ``previous_standby_tasks``: what this member's thread ran.
    - ``task_offset_sums``: per task with local state on this process, the sum of its changelog
      offsets; ``-2`` (:data:`~.lag.LATEST_OFFSET`) for a running active, ``-3``
      (:data:`~.lag.UNKNOWN_OFFSET_SUM`) when unknown.
    - ``client_tags``: ``client_tag.<key>=<value>`` pairs; ``endpoint``: ``host:port`` or ``""``.
    - ``error_code``: an :class:`~.assignment_info.AssignorError` value; ``SHUTDOWN_REQUESTED``
      asks the leader to shut the whole application down.
    - ``unique_field``: changes on every join, so that a rejoin this member asks for always
      carries new metadata (a broker answers a follower rejoining with unchanged metadata with
      the current generation instead of a rebalance).
    - ``version`` / ``latest_supported_version``: the version the data is encoded in and the
      newest this member could use.
    """

    process_id: uuid.UUID
    previous_active_tasks: frozenset[TaskId] = frozenset()
    previous_standby_tasks: frozenset[TaskId] = frozenset()
    task_offset_sums: Mapping[TaskId, int] = dataclasses.field(default_factory=dict, hash=False)
    client_tags: Mapping[str, str] = dataclasses.field(default_factory=dict, hash=False)
    endpoint: str = ""
    error_code: int = 0
    unique_field: int = 0
    version: int = LATEST_SUPPORTED_VERSION
    latest_supported_version: int = LATEST_SUPPORTED_VERSION

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not isinstance(self.process_id, uuid.UUID):
            raise GroupProtocolError(
                f"process_id must be a uuid.UUID, got {type(self.process_id).__name__} {self.process_id!r}"
            )
        active = _task_set("previous_active_tasks", self.previous_active_tasks)
        standby = _task_set("previous_standby_tasks", self.previous_standby_tasks)
        both = active & standby
        if both:
            raise GroupProtocolError(
                f"tasks cannot be both previous active and previous standby: {[str(t) for t in sorted(both)]}"
            )
        set_(self, "previous_active_tasks", active)
        set_(self, "previous_standby_tasks", standby)
        sums = dict(self.task_offset_sums)
        for task, total in sums.items():
            if not isinstance(task, TaskId):
                raise GroupProtocolError(f"task_offset_sums keys must be TaskId, got {type(task).__name__} {task!r}")
            if (isinstance(total, bool) or not isinstance(total, int)
                    or not (total >= 0 or total in (LATEST_OFFSET, UNKNOWN_OFFSET_SUM)) or total >= 2**63):
                raise GroupProtocolError(
                    f"offset sum of task {task} must be an int >= 0, {LATEST_OFFSET} (running active) or "
                    f"{UNKNOWN_OFFSET_SUM} (unknown), got {total!r}"
                )
        set_(self, "task_offset_sums", MappingProxyType(sums))
        tags = dict(self.client_tags)
        for key, value in tags.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise GroupProtocolError(f"client_tags must map str to str, got {key!r}: {value!r}")
        set_(self, "client_tags", MappingProxyType(tags))
        check_endpoint(self.endpoint)
        for field, number, low, high in (("error_code", self.error_code, -(2**31), 2**31 - 1),
                                        ("unique_field", self.unique_field, 0, 255),
                                        ("version", self.version, 1, 2**31 - 1),
                                        ("latest_supported_version", self.latest_supported_version, 1, 2**31 - 1)):
            if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
                raise GroupProtocolError(f"{field} must be an int in [{low}, {high}], got {number!r}")
        if self.latest_supported_version < self.version:
            raise GroupProtocolError(
                f"latest_supported_version ({self.latest_supported_version}) is older than the used "
                f"version ({self.version})"
            )

    def encode(self) -> bytes:
        """The bytes of :attr:`version` (which must be one this build can write)."""
        return encode_message(self, _ENCODERS)

    @classmethod
    def decode(cls, data: bytes) -> SubscriptionInfo:
        """Decode any version this build knows; a newer one raises
        :class:`~airflow_stateful_provider.streams.errors.UnsupportedGroupProtocolVersionError`
        naming both versions, garbage raises :class:`GroupProtocolError`."""
        return decode_message(data, "subscription data", _DECODERS)


def _encode_v1(info: SubscriptionInfo, w: ProtocolWriter) -> None:
    w.uuid("process_id", info.process_id)
    w.task_set("previous_active_tasks", info.previous_active_tasks)
    w.task_set("previous_standby_tasks", info.previous_standby_tasks)
    w.task_offset_sums("task_offset_sums", info.task_offset_sums)
    w.string("endpoint", info.endpoint)
    w.count("client tag count", len(info.client_tags))
    for key in sorted(info.client_tags):
        w.string("client tag key", key)
        w.string(f"client tag {key!r}", info.client_tags[key])
    w.i32("error_code", info.error_code)
    w.u8("unique_field", info.unique_field)


def _decode_v1(r: ProtocolReader, used: int, latest: int) -> SubscriptionInfo:
    process_id = r.uuid("process_id")
    active = r.task_set("previous_active_tasks")
    standby = r.task_set("previous_standby_tasks")
    sums = r.task_offset_sums("task_offset_sums")
    endpoint = r.string("endpoint")
    tags = {}
    for _ in range(r.count("client tag count")):
        key = r.string("client tag key")
        tags[key] = r.string(f"client tag {key!r}")
    error_code = r.i32("error_code")
    unique_field = r.u8("unique_field")
    try:
        return SubscriptionInfo(process_id, active, standby, sums, tags, endpoint, error_code, unique_field,
                                version=used, latest_supported_version=max(latest, used))
    except GroupProtocolError as exc:
        raise r.error(str(exc)) from None


#: Version -> encoder / decoder. Adding version N: write ``_encode_vN`` / ``_decode_vN``
#: (older versions keep theirs, so data of older members still decodes), register both,
#: raise LATEST_SUPPORTED_VERSION, and document the layout in docs/group-protocol.md.
_ENCODERS: dict[int, Callable[[SubscriptionInfo, ProtocolWriter], None]] = {1: _encode_v1}
_DECODERS: dict[int, Callable[[ProtocolReader, int, int], SubscriptionInfo]] = {1: _decode_v1}
