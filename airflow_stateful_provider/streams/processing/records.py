"""Records as they enter a task (raw, from a consumer) and leave it (to a producer).

Any object with the attributes of :class:`ConsumedRecord` (such as kafka-python's
``ConsumerRecord``) can be handed to a task.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import struct
from collections.abc import Mapping
from typing import NamedTuple

__all__ = [
    "ConsumedRecord",
    "OffsetAndMetadata",
    "decode_commit_metadata",
    "decode_partition_time",
    "encode_commit_metadata",
    "encode_partition_time",
]


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
    headers: tuple[tuple[str, bytes | None], ...] | list[tuple[str, bytes | None]] = ()


_PARTITION_TIME = struct.Struct(">bq")
_PARTITION_TIME_VERSION = 1
_WITH_PROCESSOR_METADATA_VERSION = 2


def encode_commit_metadata(partition_time: int, processor_metadata: Mapping[str, int] | None = None) -> str:
    """The metadata string committed with an input offset: the partition's time, so stream
    time survives a restart, and the task's processor metadata (e.g. the last window close
    time an emit-on-close aggregation emitted up to), so nothing is emitted twice.

    Same idea as Kafka Streams' TopicPartitionMetadata: version byte + 8-byte time
    (+ JSON processor metadata in version 2), base64.
    """
    if processor_metadata:
        extra = json.dumps(dict(processor_metadata), separators=(",", ":"), sort_keys=True).encode()
        raw = _PARTITION_TIME.pack(_WITH_PROCESSOR_METADATA_VERSION, partition_time) + extra
    else:
        raw = _PARTITION_TIME.pack(_PARTITION_TIME_VERSION, partition_time)
    return base64.b64encode(raw).decode("ascii")


def decode_commit_metadata(metadata: str | None) -> tuple[int, dict[str, int]]:
    """Inverse of :func:`encode_commit_metadata`: (partition time or -1, processor metadata).
    Empty or foreign metadata decodes as (-1, {}) rather than failing the task."""
    if not metadata:
        return -1, {}
    try:
        raw = base64.b64decode(metadata.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return -1, {}
    if len(raw) < _PARTITION_TIME.size:
        return -1, {}
    version, partition_time = _PARTITION_TIME.unpack_from(raw)
    if version == _PARTITION_TIME_VERSION and len(raw) == _PARTITION_TIME.size:
        return partition_time, {}
    if version == _WITH_PROCESSOR_METADATA_VERSION:
        try:
            extra = json.loads(raw[_PARTITION_TIME.size:].decode())
        except ValueError:
            return partition_time, {}
        if isinstance(extra, dict):
            return partition_time, {str(k): v for k, v in extra.items() if isinstance(v, int)}
        return partition_time, {}
    return -1, {}


def encode_partition_time(partition_time: int) -> str:
    """Commit metadata carrying only a partition's time (see :func:`encode_commit_metadata`)."""
    return encode_commit_metadata(partition_time)


def decode_partition_time(metadata: str | None) -> int:
    """The partition time of commit metadata; -1 (unknown) for empty or foreign metadata."""
    return decode_commit_metadata(metadata)[0]
