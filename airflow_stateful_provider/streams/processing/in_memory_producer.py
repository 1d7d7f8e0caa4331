"""The producer the TopologyTestDriver hands its tasks: every send is captured in order, with
offsets per topic from 0, and acknowledged at once (no broker)."""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from typing import Any, NamedTuple

__all__ = ["InMemoryProducer", "Produced"]


@dataclasses.dataclass(frozen=True)
class Produced:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]


class _Metadata(NamedTuple):
    topic: str
    partition: int
    offset: int


class _Done:
    """A send result whose callback runs at once (what a future does once acknowledged)."""

    __slots__ = ("_metadata",)

    def __init__(self, metadata: _Metadata) -> None:
        self._metadata = metadata

    def add_callback(self, fn: Any, *args: Any) -> _Done:
        fn(*args, self._metadata) if args else fn(self._metadata)
        return self

    def add_errback(self, fn: Any, *args: Any) -> _Done:
        return self


class InMemoryProducer:
    """Captures everything the tasks produce (sinks, changelogs, dead letters)."""

    def __init__(self) -> None:
        self.pending: deque[Produced] = deque()
        self._offsets: dict[str, itertools.count[int]] = {}

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> _Done:
        offset = next(self._offsets.setdefault(topic, itertools.count()))
        part = 0 if partition is None else partition
        self.pending.append(
            Produced(topic, part, offset, key, value, timestamp_ms or 0, tuple(headers or ()))
        )
        return _Done(_Metadata(topic, part, offset))

    def flush(self, timeout: float | None = None) -> None:
        pass

    def partitions_for(self, topic: str) -> set[int]:
        return {0}
