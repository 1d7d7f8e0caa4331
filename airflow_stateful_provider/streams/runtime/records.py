"""Records as they enter a task (raw, from a consumer) and leave it (to a producer).

``TopicPartition`` is a plain named tuple, so it compares and hashes equal to
kafka-python's ``TopicPartition`` and the runtime can mix them freely. Any object
with the attributes of :class:`ConsumedRecord` (such as kafka-python's
``ConsumerRecord``) can be handed to a task.
"""

from __future__ import annotations

import base64
import dataclasses
import struct
from typing import NamedTuple

__all__ = [
    "ConsumedRecord",
    "OffsetAndMetadata",
    "TopicPartition",
    "decode_partition_time",
    "encode_partition_time",
]


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    """An offset to commit (the next one to read) and its metadata string."""

    offset: int
    metadata: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """A raw record of a source topic: serialized key and value, as a consumer returns it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] | list = ()


_PARTITION_TIME = struct.Struct(">bq")
_PARTITION_TIME_VERSION = 1


def encode_partition_time(partition_time: int) -> str:
    """Commit metadata carrying a partition's time, so stream time survives a restart
    (the same idea, and layout, as Kafka Streams: version byte + 8-byte time, base64)."""
    return base64.b64encode(_PARTITION_TIME.pack(_PARTITION_TIME_VERSION, partition_time)).decode("ascii")


def decode_partition_time(metadata: str | None) -> int:
    """Inverse of :func:`encode_partition_time`; -1 (unknown) for empty or foreign metadata."""
    if not metadata:
        return -1
    try:
        raw = base64.b64decode(metadata.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return -1
    if len(raw) != _PARTITION_TIME.size or raw[0] != _PARTITION_TIME_VERSION:
        return -1
    return _PARTITION_TIME.unpack(raw)[1]
