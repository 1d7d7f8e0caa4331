"""Per-task counters (processed, punctuated, dropped records by reason).

Kafka Streams exposes these as JMX metrics (``process-total``, ``dropped-records-total``,
...). Here they are plain counters a status publisher or a test can read.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

__all__ = ["TaskMetrics"]


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
