"""What a changelog carries: the record read back for restoration, and the writer a logged
store sends its writes to.

Stores restore from :class:`ChangelogRecord` batches; the changelogging wrappers write
through a :class:`ChangelogWriter`. Both sides import this module, and it imports neither.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

__all__ = ["ChangelogRecord", "ChangelogWriter", "ListChangelogWriter"]


@runtime_checkable
class ChangelogWriter(Protocol):
    """Where a logged store sends its writes (the runtime binds it to a producer and the
    changelog partition of the task)."""

    def send(self, key: bytes, value: bytes | None, timestamp: int) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class ChangelogRecord:
    """One changelog record as read back for restoration."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    offset: int = -1


class ListChangelogWriter:
    """A changelog kept in a list, with offsets from 0: for tests, the TopologyTestDriver and
    benchmarks. ``records`` can be fed straight to ``restore_batch``."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: list[ChangelogRecord] = []

    def send(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        self.records.append(ChangelogRecord(key, value, timestamp, len(self.records)))

    def __iter__(self) -> Iterator[ChangelogRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)
