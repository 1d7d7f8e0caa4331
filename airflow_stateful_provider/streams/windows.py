"""Session windows, windowed keys and emit strategies (docs/semantics.md §4).

A session window groups a key's records separated by less than (or exactly) the
inactivity gap; windows are inclusive ``[start, end]``. The grace period is how
long after a window's end out-of-order records are still accepted.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from datetime import timedelta
from typing import Any, Generic, TypeVar

from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import ConfigError

__all__ = [
    "EmitStrategy",
    "SessionWindow",
    "SessionWindowedSerde",
    "SessionWindows",
    "Windowed",
]

K = TypeVar("K")

_LONG = struct.Struct(">q")


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class SessionWindow:
    """An inclusive time range ``[start, end]`` in ms."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"session window needs 0 <= start <= end, got [{self.start}, {self.end}]")

    def overlap(self, other: SessionWindow) -> bool:
        return self.start <= other.end and other.start <= self.end

    def merge(self, other: SessionWindow) -> SessionWindow:
        return SessionWindow(min(self.start, other.start), max(self.end, other.end))

    def __str__(self) -> str:
        return f"[{self.start},{self.end}]"


@dataclasses.dataclass(frozen=True, slots=True)
class Windowed(Generic[K]):
    """A key together with the window its aggregate belongs to."""

    key: K
    window: SessionWindow

    def __str__(self) -> str:
        return f"[{self.key}@{self.window.start}/{self.window.end}]"


_new = object.__new__
_set_start, _set_end = SessionWindow.__dict__["start"].__set__, SessionWindow.__dict__["end"].__set__
_set_windowed_key, _set_window = Windowed.__dict__["key"].__set__, Windowed.__dict__["window"].__set__


def trusted_windowed(key: Any, start: int, end: int) -> Windowed:
    """``Windowed(key, SessionWindow(start, end))`` for bounds known valid (0 <= start <=
    end: read from a store, or merged from valid ones), without the checks: stores and
    session aggregations build one or more per record."""
    window = _new(SessionWindow)
    _set_start(window, start)
    _set_end(window, end)
    windowed = _new(Windowed)
    _set_windowed_key(windowed, key)
    _set_window(windowed, window)
    return windowed


class SessionWindows:
    """Session window specification: inactivity gap and grace period.

    Build with :meth:`of_inactivity_gap_with_no_grace` or :meth:`of_inactivity_gap_and_grace`
    (the Kafka Streams names); durations are int ms or timedelta.
    """

    __slots__ = ("inactivity_gap_ms", "grace_period_ms")

    def __init__(self, inactivity_gap_ms: int, grace_period_ms: int) -> None:
        if inactivity_gap_ms <= 0:
            raise ConfigError(f"session window inactivity gap must be > 0 ms, got {inactivity_gap_ms}")
        if grace_period_ms < 0:
            raise ConfigError(f"session window grace period must be >= 0 ms, got {grace_period_ms}")
        self.inactivity_gap_ms = inactivity_gap_ms
        self.grace_period_ms = grace_period_ms

    @classmethod
    def of_inactivity_gap_with_no_grace(cls, inactivity_gap: int | timedelta) -> SessionWindows:
        return cls(duration_ms(inactivity_gap, "inactivity_gap"), 0)

    @classmethod
    def of_inactivity_gap_and_grace(
        cls, inactivity_gap: int | timedelta, after_window_end: int | timedelta
    ) -> SessionWindows:
        return cls(
            duration_ms(inactivity_gap, "inactivity_gap"),
            duration_ms(after_window_end, "after_window_end (grace)"),
        )

    def default_retention_ms(self) -> int:
        """Store retention when none is configured: gap + grace (docs/semantics.md §4)."""
        return self.inactivity_gap_ms + self.grace_period_ms

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SessionWindows)
            and other.inactivity_gap_ms == self.inactivity_gap_ms
            and other.grace_period_ms == self.grace_period_ms
        )

    def __hash__(self) -> int:
        return hash((self.inactivity_gap_ms, self.grace_period_ms))

    def __repr__(self) -> str:
        return f"SessionWindows(gap={self.inactivity_gap_ms}ms, grace={self.grace_period_ms}ms)"


class EmitStrategy:
    """When a windowed aggregation forwards results.

    ``on_window_update()`` (default): every update, with tombstones for merged-away
    sessions. ``on_window_close()``: each session once, when stream time passes its
    end + grace, never a tombstone.
    """

    class StrategyType(enum.Enum):
        ON_WINDOW_UPDATE = "on_window_update"
        ON_WINDOW_CLOSE = "on_window_close"

    __slots__ = ("type",)

    def __init__(self, type_: EmitStrategy.StrategyType) -> None:
        self.type = type_

    @classmethod
    def on_window_update(cls) -> EmitStrategy:
        return cls(cls.StrategyType.ON_WINDOW_UPDATE)

    @classmethod
    def on_window_close(cls) -> EmitStrategy:
        return cls(cls.StrategyType.ON_WINDOW_CLOSE)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EmitStrategy) and other.type is self.type

    def __hash__(self) -> int:
        return hash(self.type)

    def __repr__(self) -> str:
        return f"EmitStrategy.{self.type.value}()"


class SessionWindowedSerde:
    """Serde for ``Windowed`` keys of session aggregates: inner key bytes + end (8 bytes
    big-endian) + start (8 bytes big-endian), the session store's key layout."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = f"session-windowed({getattr(inner, 'name', type(inner).__name__)})"

    def serialize(self, value: Windowed | None) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, Windowed):
            raise TypeError(f"SessionWindowedSerde can only serialize Windowed keys, got {value!r}")
        key = self.inner.serialize(value.key)
        if key is None:
            raise TypeError(f"inner serde returned None for windowed key {value.key!r}")
        return bytes(key) + _LONG.pack(value.window.end) + _LONG.pack(value.window.start)

    def deserialize(self, data: bytes | None) -> Windowed | None:
        if data is None:
            return None
        if len(data) < 16:
            raise ValueError(f"session-windowed key must be at least 16 bytes, got {len(data)}: {data!r}")
        end = _LONG.unpack_from(data, len(data) - 16)[0]
        start = _LONG.unpack_from(data, len(data) - 8)[0]
        return Windowed(self.inner.deserialize(bytes(data[:-16])), SessionWindow(start, end))

    def __repr__(self) -> str:
        return f"SessionWindowedSerde({self.inner!r})"
