"""Per-task and per-thread counters, named after Kafka Streams' metrics.

Kafka Streams exposes these as JMX metrics of its ``stream-task-metrics`` group
(``process-total``, ``dropped-records-total``, ...) and its ``stream-thread-metrics`` group
(``process-total``, ``commit-latency-avg``, ``poll-records-avg``, ...). Here they are plain
counters and windowed samples that the status publisher reads (the rates are computed there,
from successive documents) and a test can read directly.
"""

from __future__ import annotations

import collections
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

__all__ = ["TaskMetrics", "ThreadMetrics", "WindowedStat"]


class TaskMetrics:
    """Counters of one task. ``dropped_records_total`` counts every record a processor
    skipped (null key, late, poison); ``dropped_records`` breaks it down by reason."""

    __slots__ = ("task_id", "process_total", "punctuate_total", "dropped_records")

    def __init__(self, task_id: Any) -> None:
        self.task_id = task_id
        self.process_total = 0
        self.punctuate_total = 0
        self.dropped_records: Counter[str] = Counter()

    def record_dropped(self, reason: str, count: int = 1) -> None:
        """Count a skipped record; ``reason`` such as "null-key", "late", "deserialization"."""
        self.dropped_records[reason] += count

    @property
    def dropped_records_total(self) -> int:
        return sum(self.dropped_records.values())

    def as_dict(self) -> dict[str, int]:
        out = {
            "process-total": self.process_total,
            "punctuate-total": self.punctuate_total,
            "dropped-records-total": self.dropped_records_total,
        }
        for reason, count in sorted(self.dropped_records.items()):
            out[f"dropped-records-total:{reason}"] = count
        return out

    def __repr__(self) -> str:
        return f"TaskMetrics({self.task_id}, {self.as_dict()})"


class WindowedStat:
    """Average and maximum of the values recorded within the last ``window_s`` seconds (Kafka
    metrics keep two 30-second samples: a value stops counting 30 to 60 s after it was
    recorded; here after exactly ``window_s``). Thread-safe: the stream thread records, the
    status publisher reads."""

    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._values: collections.deque[tuple[float, float]] = collections.deque()
        self._lock = threading.Lock()

    def record(self, value: float) -> None:
        now = self._clock()
        with self._lock:
            self._values.append((now, float(value)))
            self._expire(now)

    def _expire(self, now: float) -> None:
        while self._values and self._values[0][0] <= now - self.window_s:
            self._values.popleft()

    def avg_max(self) -> tuple[float | None, float | None]:
        """(average, maximum) of the window; (None, None) when it holds no value."""
        with self._lock:
            self._expire(self._clock())
            values = [v for _, v in self._values]
        if not values:
            return None, None
        return sum(values) / len(values), max(values)


class ThreadMetrics:
    """Counters and samples of one stream thread (Kafka Streams' thread level).

    ``process_total`` counts the records the thread's tasks processed (it keeps counting when
    tasks move away, unlike the task counters); ``commit_latency`` samples the wall time of
    each commit that committed something (all the thread's tasks at once: one transaction
    under exactly-once), in ms; ``poll_records`` the size of each main-consumer poll that
    returned records; ``transaction_aborts_total`` the transactions the thread aborted.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.process_total = 0
        #: time.time() of the last iteration that processed records (None: none yet).
        self.processed_at: float | None = None
        self.commit_total = 0
        self.transaction_aborts_total = 0
        self.commit_latency = WindowedStat(clock=clock)
        self.poll_records = WindowedStat(clock=clock)

    def record_processed(self, records: int) -> None:
        self.process_total += records
        if records:
            self.processed_at = time.time()

    def record_poll(self, records: int) -> None:
        if records > 0:  # as Kafka Streams: empty polls are not samples
            self.poll_records.record(records)

    def record_commit(self, latency_ms: float) -> None:
        self.commit_total += 1
        self.commit_latency.record(latency_ms)

    def record_transaction_abort(self) -> None:
        self.transaction_aborts_total += 1
