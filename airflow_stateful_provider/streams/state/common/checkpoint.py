"""The task directory's ``.checkpoint`` file (docs/semantics.md §1, Kafka's OffsetCheckpoint).

It records, per changelog partition, the offset of the last record applied to
the task's persistent stores, so a restart restores only what came after it.
Format (UTF-8 text)::

    0                      <- version
    2                      <- number of entries
    app-s-changelog 0 5    <- topic partition offset
    app-s-changelog 1 -4   <- -4: offset unknown

Writes are atomic (``.checkpoint.tmp``, fsync, rename, fsync of the directory) so a
crash leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from airflow_stateful_provider.streams.errors import CorruptCheckpointError
from airflow_stateful_provider.streams.topic_partition import TopicPartition

__all__ = [
    "CHECKPOINT_FILE_NAME",
    "OFFSET_UNKNOWN",
    "OffsetCheckpoint",
    "read_checkpoint",
    "write_checkpoint",
]

CHECKPOINT_FILE_NAME = ".checkpoint"
#: Offset sentinel meaning "this partition is checkpointed but its offset is unknown".
#: -4 because -1..-3 already mean other things in Kafka (producer errors, "latest" in
#: subscriptions); a plain int so it compares and serialises without ceremony.
OFFSET_UNKNOWN = -4
VERSION = 0

_WHITESPACE = re.compile(r"\s+")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_INT = re.compile(r"[+-]?[0-9]+")
_INT32_MAX = (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _parse_int(text: str, what: str, path: str, line_no: int, lo: int, hi: int) -> int:
    if not _INT.fullmatch(text):
        raise CorruptCheckpointError(f"{path}: line {line_no}: {what} {text!r} is not an integer")
    value = int(text)
    if not lo <= value <= hi:
        raise CorruptCheckpointError(f"{path}: line {line_no}: {what} {value} is out of range")
    return value


def read_checkpoint(path: str | os.PathLike[str]) -> dict[TopicPartition, int]:
    """Offsets in the checkpoint file at ``path``; a missing file is an empty map.

    Values are offsets >= 0 or :data:`OFFSET_UNKNOWN`. Negative offsets other than -4
    are skipped and not counted (Kafka logs and drops them). Any format violation
    raises :class:`CorruptCheckpointError` naming the file and the line.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # the newline ending the last line does not start another one
    if not lines:
        raise CorruptCheckpointError(f"{path}: file ended before the version line")
    version = _parse_int(lines[0], "version", path, 1, _INT64_MIN, _INT64_MAX)
    if version != VERSION:
        raise CorruptCheckpointError(f"{path}: unknown checkpoint version {version} (expected {VERSION})")
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{path}: file ended before the entry count line")
    expected = _parse_int(lines[1], "entry count", path, 2, _INT64_MIN, _INT64_MAX)
    offsets: dict[TopicPartition, int] = {}
    for index, line in enumerate(lines[2:], start=3):
        pieces = _WHITESPACE.split(line)
        while len(pieces) > 1 and pieces[-1] == "":
            pieces.pop()  # like Java's String.split: trailing whitespace is ignored, leading is not
        if len(pieces) != 3:
            raise CorruptCheckpointError(
                f"{path}: line {index}: expected 'topic partition offset', got {line!r}"
            )
        topic = pieces[0]
        partition = _parse_int(pieces[1], "partition", path, index, -_INT32_MAX - 1, _INT32_MAX)
        offset = _parse_int(pieces[2], "offset", path, index, _INT64_MIN, _INT64_MAX)
        if offset >= 0 or offset == OFFSET_UNKNOWN:
            offsets[TopicPartition(topic, partition)] = offset
        else:
            expected -= 1
    if len(offsets) != expected:
        raise CorruptCheckpointError(
            f"{path}: header announces {expected} valid entries but the file holds {len(offsets)}"
        )
    return offsets


def write_checkpoint(path: str | os.PathLike[str], offsets: Mapping[TopicPartition, int]) -> None:
    """Atomically replace the checkpoint at ``path`` with ``offsets``; empty deletes the file.

    Offsets must be >= 0 or :data:`OFFSET_UNKNOWN`; a topic must be non-empty without
    whitespace (it could not be read back otherwise).
    """
    path = os.fspath(path)
    if not offsets:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        return
    lines = [str(VERSION), str(len(offsets))]
    for tp, offset in offsets.items():
        topic, partition = tp
        if not isinstance(topic, str) or not topic or _WHITESPACE.search(topic):
            raise CorruptCheckpointError(f"cannot checkpoint topic {topic!r}: empty or contains whitespace")
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise CorruptCheckpointError(f"cannot checkpoint partition {partition!r} of topic {topic!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or not (
            offset >= 0 or offset == OFFSET_UNKNOWN
        ):
            raise CorruptCheckpointError(
                f"cannot checkpoint offset {offset!r} for {topic}-{partition}: "
                f"must be >= 0 or {OFFSET_UNKNOWN} (unknown)"
            )
        lines.append(f"{topic} {partition} {offset}")
    data = ("\n".join(lines) + "\n").encode("utf-8")
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def _fsync_dir(directory: str) -> None:
    """Make a rename durable: fsync the directory entry (a no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class OffsetCheckpoint:
    """A checkpoint file bound to its path (Kafka's ``OffsetCheckpoint`` object)."""

    __slots__ = ("path",)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    @classmethod
    def in_task_dir(cls, task_dir: str | os.PathLike[str]) -> OffsetCheckpoint:
        return cls(os.path.join(os.fspath(task_dir), CHECKPOINT_FILE_NAME))

    def read(self) -> dict[TopicPartition, int]:
        return read_checkpoint(self.path)

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        write_checkpoint(self.path, offsets)

    def delete(self) -> None:
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"OffsetCheckpoint({self.path!r})"
