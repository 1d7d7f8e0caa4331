"""Punctuation schedules and the per-task queue that fires them (docs/semantics.md §6).

A task owns two queues, one per :class:`PunctuationType`. ``maybe_punctuate(now)``
fires every due schedule once, with ``now`` (not the due time), and re-adds its
successor; intervals missed while nothing checked the queue collapse into one call
so a long pause never causes a burst of punctuations.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.processor import Cancellable, PunctuationType, Punctuator

__all__ = ["PunctuationQueue", "PunctuationSchedule"]


class _RepointableCancellable:
    """The handle given to the user; it always points at the live successor schedule."""

    __slots__ = ("schedule",)

    def __init__(self) -> None:
        self.schedule: PunctuationSchedule | None = None

    def cancel(self) -> None:
        if self.schedule is not None:
            self.schedule.cancelled = True

    def __repr__(self) -> str:
        return f"Cancellable({self.schedule!r})"


class PunctuationSchedule:
    """One due time of a recurring punctuator. ``node`` is whatever the caller needs to
    run the punctuator in the right processor context (a node name or node object)."""

    __slots__ = ("node", "timestamp", "interval", "punctuator", "cancelled", "_cancellable")

    def __init__(
        self,
        node: Any,
        timestamp: int,
        interval: int,
        punctuator: Punctuator,
        cancellable: _RepointableCancellable | None = None,
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ConfigError(f"punctuation interval must be >= 1 ms, got {interval!r}")
        self.node = node
        self.timestamp = timestamp
        self.interval = interval
        self.punctuator = punctuator
        self.cancelled = False
        self._cancellable = cancellable if cancellable is not None else _RepointableCancellable()
        self._cancellable.schedule = self

    @property
    def cancellable(self) -> Cancellable:
        return self._cancellable

    def next(self, now: int) -> PunctuationSchedule:
        """The successor schedule after firing at ``now``; missed intervals collapse."""
        next_time = self.timestamp + self.interval
        if now >= next_time:
            missed = (now - self.timestamp) // self.interval
            next_time = self.timestamp + (missed + 1) * self.interval
        return PunctuationSchedule(
            self.node, next_time, self.interval, self.punctuator, self._cancellable
        )

    def __repr__(self) -> str:
        state = ", cancelled" if self.cancelled else ""
        return f"PunctuationSchedule(due={self.timestamp}, interval={self.interval}{state})"


#: Runs one punctuation: (node, now, type, punctuator). The task supplies it so that the
#: punctuator runs with the node set as current in the processor context.
PunctuateCallback = Callable[[Any, int, PunctuationType, Punctuator], None]


def _call_directly(node: Any, now: int, type_: PunctuationType, punctuator: Punctuator) -> None:
    punctuator(now)


class PunctuationQueue:
    """Schedules ordered by due time (ties: the order they were added)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, PunctuationSchedule]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, sched: PunctuationSchedule) -> Cancellable:
        heapq.heappush(self._heap, (sched.timestamp, next(self._seq), sched))
        return sched.cancellable

    def maybe_punctuate(
        self,
        now: int,
        punctuation_type: PunctuationType,
        callback: PunctuateCallback = _call_directly,
    ) -> bool:
        """Fire every schedule due at ``now`` (due <= now); True if any fired."""
        punctuated = False
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, sched = heapq.heappop(heap)
            if sched.cancelled:
                continue
            callback(sched.node, now, punctuation_type, sched.punctuator)
            # The punctuator may have cancelled its own schedule.
            if not sched.cancelled:
                self.schedule(sched.next(now))
            punctuated = True
        return punctuated

    def can_punctuate(self, now: int) -> bool:
        """True if a live schedule is due at ``now``; drops cancelled ones on the way."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            if not heap[0][2].cancelled:
                return True
            heapq.heappop(heap)
        return False

    def next_due(self) -> int | None:
        """Earliest due time of a live schedule, or None (lets a loop sleep precisely)."""
        for due, _, sched in sorted(self._heap):
            if not sched.cancelled:
                return due
        return None

    def close(self) -> None:
        self._heap.clear()
