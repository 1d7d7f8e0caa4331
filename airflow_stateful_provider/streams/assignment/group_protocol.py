"""Wire primitives and version rules shared by SubscriptionInfo and AssignmentInfo.

Why a shared layer: both messages travel as the opaque ``user_data`` of Kafka's consumer
protocol, both must survive rolling upgrades, and both are read by members built from
other versions of this code. So both start with the same fixed header that never changes,
``int32 used_version, int32 latest_supported_version``: any build can read the header of
any message, refuse the body of a version it does not know with an error naming both
versions, and (as group leader) answer such a member with a version it can fall back to.
The layout of every version is documented byte by byte in docs/group-protocol.md.

All integers are big-endian (``struct`` ``>``); strings are ``uint16`` length + UTF-8;
a UUID is its 16 raw bytes. Task sets are grouped by subtopology, so a task costs 4 bytes
plus 8 per subtopology instead of 8 per task.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from kafka.structs import TopicPartition

from airflow_stateful_provider.streams.errors import (
    GroupProtocolError,
    UnsupportedGroupProtocolVersionError,
)
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = [
    "EARLIEST_SUPPORTED_VERSION",
    "LATEST_SUPPORTED_VERSION",
    "ProtocolReader",
    "ProtocolWriter",
    "check_version",
    "decode_message",
    "encode_message",
    "peek_versions",
]

#: The version this build writes by default and the newest it can read.
LATEST_SUPPORTED_VERSION = 1
#: The oldest version this build can still read (and write, when a group leader asks for it).
EARLIEST_SUPPORTED_VERSION = 1

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEADER = struct.Struct(">ii")
_PARTITION_AND_SUM = struct.Struct(">iq")

_INT32_MAX = 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _int(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise GroupProtocolError(f"{field} must be an int in [{low}, {high}], got {value!r}")
    return value


class ProtocolWriter:
    """Appends big-endian fields to a buffer; every value is range-checked and an error names
    the field, so a bad value never produces bytes another member misreads."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def to_bytes(self) -> bytes:
        return bytes(self._buf)

    def header(self, used_version: int, latest_supported_version: int) -> None:
        self._buf += _HEADER.pack(
            _int("used_version", used_version, 1, _INT32_MAX),
            _int("latest_supported_version", latest_supported_version, 1, _INT32_MAX),
        )

    def u8(self, field: str, value: int) -> None:
        self._buf += _U8.pack(_int(field, value, 0, 255))

    def i32(self, field: str, value: int) -> None:
        self._buf += _I32.pack(_int(field, value, -(2**31), _INT32_MAX))

    def count(self, field: str, value: int) -> None:
        self._buf += _I32.pack(_int(field, value, 0, _INT32_MAX))

    def i64(self, field: str, value: int) -> None:
        self._buf += _I64.pack(_int(field, value, _INT64_MIN, _INT64_MAX))

    def uuid(self, field: str, value: uuid.UUID) -> None:
        if not isinstance(value, uuid.UUID):
            raise GroupProtocolError(f"{field} must be a uuid.UUID, got {type(value).__name__} {value!r}")
        self._buf += value.bytes

    def string(self, field: str, value: str) -> None:
        if not isinstance(value, str):
            raise GroupProtocolError(f"{field} must be a str, got {type(value).__name__} {value!r}")
        data = value.encode("utf-8")
        if len(data) > 0xFFFF:
            raise GroupProtocolError(f"{field} is {len(data)} bytes in UTF-8, at most 65535 fit: {value[:40]!r}...")
        self._buf += _U16.pack(len(data)) + data

    def task_set(self, field: str, tasks: Iterable[TaskId]) -> None:
        """``int32 groups``, then per subtopology ``int32 subtopology, int32 n, n x int32 partition``."""
        grouped: dict[int, list[int]] = {}
        for task in sorted(tasks):
            grouped.setdefault(task.subtopology, []).append(task.partition)
        self.count(f"{field} subtopology count", len(grouped))
        for sub, partitions in grouped.items():
            self.i32(f"{field} subtopology", sub)
            self.count(f"{field} partition count", len(partitions))
            for p in partitions:
                self.i32(f"{field} partition", p)

    def task_offset_sums(self, field: str, sums: Mapping[TaskId, int]) -> None:
        """Like a task set, with an ``int64`` offset sum after each partition."""
        grouped: dict[int, list[tuple[int, int]]] = {}
        for task in sorted(sums):
            grouped.setdefault(task.subtopology, []).append((task.partition, sums[task]))
        self.count(f"{field} subtopology count", len(grouped))
        for sub, entries in grouped.items():
            self.i32(f"{field} subtopology", sub)
            self.count(f"{field} partition count", len(entries))
            for p, total in entries:
                self.i32(f"{field} partition", p)
                self.i64(f"{field} offset sum of {sub}_{p}", total)

    def partitions(self, field: str, partitions: Iterable[TopicPartition], topic_index: Mapping[str, int]) -> None:
        """``int32 n``, then n x ``int32 topic index, int32 partition`` (topics from the dictionary)."""
        ordered = sorted(partitions)
        self.count(f"{field} count", len(ordered))
        for tp in ordered:
            self.i32(f"{field} topic index", topic_index[tp.topic])
            self.i32(f"{field} partition", tp.partition)


class ProtocolReader:
    """Reads what :class:`ProtocolWriter` wrote; truncated or inconsistent data raises
    :class:`GroupProtocolError` naming the message, the field and the byte offset."""

    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes, what: str) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise GroupProtocolError(f"{what} must be bytes, got {type(data).__name__} {data!r}")
        self._data = bytes(data)
        self._pos = 0
        self._what = what

    def error(self, message: str) -> GroupProtocolError:
        return GroupProtocolError(f"{self._what}: {message} (at byte {self._pos} of {len(self._data)})")

    def _take(self, field: str, size: int) -> bytes:
        end = self._pos + size
        if end > len(self._data):
            raise self.error(f"truncated: {field} needs {size} bytes, {len(self._data) - self._pos} left")
        chunk = self._data[self._pos:end]
        self._pos = end
        return chunk

    def _unpack(self, field: str, fmt: struct.Struct) -> tuple:
        return fmt.unpack(self._take(field, fmt.size))

    def skip_header(self) -> None:
        self._take("header", _HEADER.size)

    def u8(self, field: str) -> int:
        return self._unpack(field, _U8)[0]

    def i32(self, field: str) -> int:
        return self._unpack(field, _I32)[0]

    def count(self, field: str) -> int:
        n = self.i32(field)
        if n < 0:
            raise self.error(f"{field} is negative: {n}")
        return n

    def i64(self, field: str) -> int:
        return self._unpack(field, _I64)[0]

    def uuid(self, field: str) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(field, 16))

    def string(self, field: str) -> str:
        (size,) = self._unpack(f"{field} length", _U16)
        raw = self._take(field, size)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"{field} is not UTF-8: {raw!r}") from exc

    def task_id(self, field: str, subtopology: int, partition: int) -> TaskId:
        if subtopology < 0 or partition < 0:
            raise self.error(f"{field} has a negative task id {subtopology}_{partition}")
        return TaskId(subtopology, partition)

    def task_set(self, field: str) -> frozenset[TaskId]:
        tasks: set[TaskId] = set()
        for _ in range(self.count(f"{field} subtopology count")):
            sub = self.i32(f"{field} subtopology")
            for _ in range(self.count(f"{field} partition count")):
                tasks.add(self.task_id(field, sub, self.i32(f"{field} partition")))
        return frozenset(tasks)

    def task_offset_sums(self, field: str) -> dict[TaskId, int]:
        sums: dict[TaskId, int] = {}
        for _ in range(self.count(f"{field} subtopology count")):
            sub = self.i32(f"{field} subtopology")
            for _ in range(self.count(f"{field} partition count")):
                partition, total = self._unpack(f"{field} entry", _PARTITION_AND_SUM)
                sums[self.task_id(field, sub, partition)] = total
        return sums

    def partitions(self, field: str, topics: list[str]) -> frozenset[TopicPartition]:
        result: set[TopicPartition] = set()
        for _ in range(self.count(f"{field} count")):
            index = self.i32(f"{field} topic index")
            partition = self.i32(f"{field} partition")
            if not 0 <= index < len(topics):
                raise self.error(f"{field} refers to topic index {index}, the dictionary has {len(topics)}")
            if partition < 0:
                raise self.error(f"{field} has a negative partition {partition} of topic {topics[index]!r}")
            result.add(TopicPartition(topics[index], partition))
        return frozenset(result)

    def expect_end(self) -> None:
        if self._pos != len(self._data):
            raise self.error(f"{len(self._data) - self._pos} unexpected trailing bytes")


def peek_versions(data: bytes, what: str = "group protocol data") -> tuple[int, int]:
    """``(used_version, latest_supported_version)`` from the header, which every version
    shares; works on data of versions this build cannot decode."""
    reader = ProtocolReader(data, what)
    used = reader.i32("used_version")
    latest = reader.i32("latest_supported_version")
    if used < 1:
        raise reader.error(f"used_version must be >= 1, got {used}")
    return used, latest


def check_version(used_version: int, latest_supported_version: int, what: str, known_versions: Collection[int]) -> None:
    """Refuse data whose version has no decoder here: newer than every known version (a member
    of a newer release; the message names both versions) or an older, retired one.
    ``known_versions`` is the message's decoder table, so adding a version is one entry there."""
    if used_version in known_versions:
        return
    newest = max(known_versions)
    if used_version > newest:
        raise UnsupportedGroupProtocolVersionError(
            f"{what} has version {used_version} (its sender supports up to {latest_supported_version}), "
            f"but this member supports versions {min(known_versions)} to {newest}; "
            f"upgrade this member, or have the sender fall back to version {newest}",
            received_version=used_version,
            latest_supported_version=newest,
        )
    raise GroupProtocolError(
        f"{what} has version {used_version}, which this member cannot read (it reads "
        f"{sorted(known_versions)})"
    )


def encode_message(message: Any, encoders: Mapping[int, Callable[[Any, ProtocolWriter], None]]) -> bytes:
    """The header, then the body written by ``encoders[message.version]`` (a message's
    table of versions it can write)."""
    encoder = encoders.get(message.version)
    if encoder is None:
        raise GroupProtocolError(
            f"cannot encode {type(message).__name__} version {message.version}; this build writes {sorted(encoders)}"
        )
    writer = ProtocolWriter()
    writer.header(message.version, message.latest_supported_version)
    encoder(message, writer)
    return writer.to_bytes()


def decode_message(data: bytes, what: str, decoders: Mapping[int, Callable[[ProtocolReader, int, int], Any]]) -> Any:
    """Decode any version in ``decoders``; a newer one raises
    :class:`~airflow_stateful_provider.streams.errors.UnsupportedGroupProtocolVersionError`
    naming both versions, garbage raises :class:`GroupProtocolError` naming ``what``."""
    used, latest = peek_versions(data, what)
    check_version(used, latest, what, decoders)
    reader = ProtocolReader(data, f"{what} (version {used})")
    reader.skip_header()
    message = decoders[used](reader, used, latest)
    reader.expect_end()
    return message
