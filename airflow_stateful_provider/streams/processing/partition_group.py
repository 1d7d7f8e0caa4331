"""Buffered input of one task, and the choice of which record goes next.

A task reads several partitions (one per source topic of its subtopology). Each has
a :class:`RecordQueue`; :class:`PartitionGroup` hands out the buffered record with the
smallest timestamp across them (docs/architecture.md, "The engine's model") and keeps
the task's stream time: the largest timestamp processed so far, -1 until the first.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_stateful_provider.streams.processor import Record
from airflow_stateful_provider.streams.topic_partition import TopicPartition

__all__ = ["PartitionGroup", "RecordQueue", "UNKNOWN"]

log = logging.getLogger(__name__)

#: Stream time / partition time before any record was processed.
UNKNOWN = -1

#: ``deserialize(raw, partition_time)``: a raw consumed record as a typed Record, or None
#: when it is to be skipped (deserialization error handled by CONTINUE, invalid timestamp
#: skipped); raises to fail the task.
RecordDeserializer = Callable[[Any, int], Record[Any, Any] | None]


class RecordQueue:
    """FIFO of one partition's raw records; the head is deserialized eagerly so that its
    timestamp is known for ordering."""

    __slots__ = ("partition", "source_node", "_deserialize", "_raw", "_head", "_head_raw", "partition_time")

    def __init__(self, partition: TopicPartition, source_node: str, deserialize: RecordDeserializer) -> None:
        self.partition = partition
        self.source_node = source_node
        self._deserialize = deserialize
        self._raw: deque[Any] = deque()
        self._head: Record[Any, Any] | None = None
        self._head_raw: Any = None
        #: Largest timestamp polled from this partition (-1 unknown).
        self.partition_time = UNKNOWN

    def add_raw_records(self, records: Iterable[Any]) -> int:
        self._raw.extend(records)
        self._update_head()
        return self.size()

    def poll(self) -> tuple[Record[Any, Any], Any] | None:
        """Remove and return the head (typed record, raw record)."""
        head, raw = self._head, self._head_raw
        if head is None:
            return None
        self._head = self._head_raw = None
        if head.timestamp > self.partition_time:
            self.partition_time = head.timestamp
        self._update_head()
        return head, raw

    @property
    def head_timestamp(self) -> int:
        return self._head.timestamp if self._head is not None else UNKNOWN

    def is_empty(self) -> bool:
        return self._head is None and not self._raw

    def size(self) -> int:
        return len(self._raw) + (1 if self._head is not None else 0)

    def clear(self) -> None:
        self._raw.clear()
        self._head = self._head_raw = None

    def _update_head(self) -> None:
        raw_queue = self._raw
        while self._head is None and raw_queue:
            raw = raw_queue.popleft()
            record = self._deserialize(raw, self.partition_time)
            if record is not None:
                self._head, self._head_raw = record, raw


class PartitionGroup:
    """All queues of a task; smallest-head-timestamp-first selection and stream time.

    ``fetched_lag(partition)`` tells whether the consumer knows of unfetched data for an
    empty partition (None = unknown, 0 = caught up); with ``max_task_idle_ms`` it decides
    whether the task waits for that data before processing out of order (KIP-695).
    Without a lag provider every empty partition counts as caught up (test driver).
    """

    def __init__(
        self,
        queues: Mapping[TopicPartition, RecordQueue],
        *,
        max_task_idle_ms: int = 0,
        fetched_lag: Callable[[TopicPartition], int | None] | None = None,
    ) -> None:
        self._queues = dict(queues)
        self._order = list(self._queues.values())
        self._max_task_idle_ms = max_task_idle_ms
        self._fetched_lag = fetched_lag
        self._idle_since: dict[TopicPartition, int] = {}
        self.stream_time = UNKNOWN
        self._buffered = 0

    @property
    def partitions(self) -> list[TopicPartition]:
        return list(self._queues)

    def queue(self, partition: TopicPartition) -> RecordQueue:
        try:
            return self._queues[partition]
        except KeyError:
            raise KeyError(f"partition {partition} is not an input of this task (inputs: "
                           f"{[str(p) for p in self._queues]})") from None

    def add_raw_records(self, partition: TopicPartition, records: Iterable[Any]) -> int:
        """Buffer records of ``partition``; returns that partition's new queue size."""
        queue = self.queue(partition)
        before = queue.size()
        after = queue.add_raw_records(records)
        self._buffered += after - before
        return after

    def next_record(self) -> tuple[Record[Any, Any], Any, RecordQueue] | None:
        """Pop the buffered record with the smallest timestamp (ties: partition order)."""
        best: RecordQueue | None = None
        best_ts = 0
        for queue in self._order:
            ts = queue.head_timestamp
            if ts != UNKNOWN and (best is None or ts < best_ts):
                best, best_ts = queue, ts
        if best is None:
            return None
        before = best.size()
        polled = best.poll()
        self._buffered -= before - best.size()
        if polled is None:  # pragma: no cover - head was known above
            return None
        record, raw = polled
        if record.timestamp > self.stream_time:
            self.stream_time = record.timestamp
        return record, raw, best

    def ready_to_process(self, wall_clock_ms: int) -> bool:
        """Whether processing now keeps timestamp order (or idling has lasted long enough)."""
        if self._buffered <= 0:
            return False
        for queue in self._order:  # the common case first: every partition has a record
            if queue.head_timestamp == UNKNOWN:
                break
        else:
            if self._idle_since:
                self._idle_since.clear()
            return True
        empty = [q.partition for q in self._order if q.head_timestamp == UNKNOWN]
        if not empty:
            self._idle_since.clear()
            return True
        if self._max_task_idle_ms < 0:  # idling disabled: process what is there
            return True
        for partition in empty:
            lag = self._fetched_lag(partition) if self._fetched_lag is not None else 0
            if lag is None:
                return False  # do not know yet whether data is coming: wait for the fetch
            if lag == 0:
                self._idle_since.pop(partition, None)
                continue
            since = self._idle_since.setdefault(partition, wall_clock_ms)
            if wall_clock_ms - since < self._max_task_idle_ms:
                return False
            log.debug("enforced processing: partition %s idle for %d ms", partition, wall_clock_ms - since)
        return True

    def num_buffered(self) -> int:
        return self._buffered

    def buffered_size(self, partition: TopicPartition) -> int:
        return self.queue(partition).size()

    def partition_time(self, partition: TopicPartition) -> int:
        return self.queue(partition).partition_time

    def set_partition_time(self, partition: TopicPartition, partition_time: int) -> None:
        """Restore a partition's time (from commit metadata); stream time follows."""
        queue = self.queue(partition)
        queue.partition_time = partition_time
        if partition_time > self.stream_time:
            self.stream_time = partition_time

    def clear(self) -> None:
        for queue in self._order:
            queue.clear()
        self._buffered = 0
        self._idle_since.clear()
