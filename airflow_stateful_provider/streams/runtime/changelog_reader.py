"""Restoration: replaying changelog partitions into a task's stores (SEMANTICS §2).

One :class:`ChangelogReader` per stream thread owns the thread's *restore consumer*
(a consumer without a group, ``auto_offset_reset="none"`` so that an out-of-range
offset is reported instead of silently skipped).

Invariants:
- a changelog partition of an active task is restored from the checkpointed offset + 1
  (the beginning without one) up to the log end offset captured when its restoration
  started; records at or past that offset are never applied by an active;
- records with a null key are skipped but advance the position;
- an out-of-range position (changelog truncated, deleted or recreated) marks the store
  corrupted: its checkpoint entry is dropped, the store wiped, and restoration restarts
  from the beginning, once per detection; it never crashes and never loops;
- a task is reported restored when all of its changelog partitions are, and its
  checkpoint is written at that moment.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Protocol

from kafka import TopicPartition as KafkaTopicPartition

from airflow_stateful_provider.streams.runtime.records import TopicPartition
from airflow_stateful_provider.streams.topology import TaskId

__all__ = ["ChangelogReader", "StateRestoreListener", "NoOpRestoreListener"]

log = logging.getLogger(__name__)


class StateRestoreListener(Protocol):
    """Restoration progress per changelog partition (Kafka Streams' StateRestoreListener)."""

    def on_restore_start(self, partition: TopicPartition, store_name: str, start_offset: int,
                         end_offset: int) -> None: ...

    def on_batch_restored(self, partition: TopicPartition, store_name: str, batch_end_offset: int,
                          num_restored: int) -> None: ...

    def on_restore_end(self, partition: TopicPartition, store_name: str, total_restored: int) -> None: ...

    def on_restore_suspended(self, partition: TopicPartition, store_name: str, total_restored: int) -> None: ...


class NoOpRestoreListener:
    def on_restore_start(self, partition, store_name, start_offset, end_offset) -> None:
        pass

    def on_batch_restored(self, partition, store_name, batch_end_offset, num_restored) -> None:
        pass

    def on_restore_end(self, partition, store_name, total_restored) -> None:
        pass

    def on_restore_suspended(self, partition, store_name, total_restored) -> None:
        pass


@dataclasses.dataclass
class ChangelogState:
    """Restoration bookkeeping of one changelog partition."""

    partition: TopicPartition
    task_id: TaskId
    store_name: str
    state_manager: Any
    #: Offset of the first record to read (checkpoint + 1, or the log start).
    start_offset: int = 0
    #: Log end offset captured when restoration started; an active stops there.
    end_offset: int = 0
    #: Next offset to read.
    position: int = 0
    restored: int = 0
    completed: bool = False


class ChangelogReader:
    """Restores registered active tasks, a poll at a time, from one restore consumer."""

    def __init__(self, restore_consumer: Any, listener: StateRestoreListener | None = None,
                 poll_timeout_ms: int = 100) -> None:
        self._consumer = restore_consumer
        self.listener: StateRestoreListener = listener or NoOpRestoreListener()
        self._poll_timeout_ms = poll_timeout_ms
        self._changelogs: dict[TopicPartition, ChangelogState] = {}
        self._tasks: dict[TaskId, list[TopicPartition]] = {}

    # ------------------------------------------------------------------ registration

    def register(self, task_id: TaskId, state_manager: Any) -> bool:
        """Start restoring the task's logged stores. Returns True when there is nothing to
        restore (the task may run at once); otherwise the task completes in :meth:`restore`."""
        partitions = {name: TopicPartition(*tp) for name, tp in state_manager.changelog_partitions().items()}
        if not partitions:
            return True
        checkpointed = state_manager.checkpointed_offsets()
        ends = _by_partition(self._consumer.end_offsets(_kafka(partitions.values())))
        begins = _by_partition(self._consumer.beginning_offsets(_kafka(partitions.values())))
        pending: list[TopicPartition] = []
        for store_name, tp in partitions.items():
            end, begin = ends[tp], begins[tp]
            checkpoint = checkpointed.get(tp)
            start = begin if checkpoint is None else checkpoint + 1
            if checkpoint is not None and not begin <= start <= end:
                # The changelog no longer has what the checkpoint says we applied: truncated,
                # recreated, or records deleted. The store cannot be trusted.
                log.warning("task %s: checkpointed offset %d of %s is outside the changelog [%d, %d); "
                            "wiping store %s and restoring it from the beginning",
                            task_id, checkpoint, tp, begin, end, store_name)
                state_manager.wipe_store(store_name)
                start = begin
            state = ChangelogState(tp, task_id, store_name, state_manager, start, end, start)
            if start >= end:
                state.completed = True
            else:
                self.listener.on_restore_start(tp, store_name, start, end)
                pending.append(tp)
            self._changelogs[tp] = state
        self._tasks[task_id] = list(partitions.values())
        if not pending:
            self._finish_task(task_id)
            return True
        self._reassign()
        return False

    def unregister(self, task_id: TaskId) -> None:
        """Stop restoring a task (revoked while restoring): restore-suspended callbacks,
        and a checkpoint of what was applied so far."""
        partitions = self._tasks.pop(task_id, [])
        manager = None
        for tp in partitions:
            state = self._changelogs.pop(tp)
            manager = state.state_manager
            if not state.completed:
                self.listener.on_restore_suspended(tp, state.store_name, state.restored)
        if manager is not None:
            manager.checkpoint({}, force=True)
        if partitions:
            self._reassign()

    @property
    def restoring_tasks(self) -> set[TaskId]:
        return set(self._tasks)

    def progress(self) -> list[ChangelogState]:
        """Bookkeeping of every registered changelog partition (for status reporting)."""
        return list(self._changelogs.values())

    # ------------------------------------------------------------------ restoring

    def restore(self, poll_timeout_ms: int | None = None) -> list[TaskId]:
        """Poll once and apply what arrived; returns the tasks whose restoration completed."""
        from kafka.errors import OffsetOutOfRangeError

        if not self._tasks:
            return []
        timeout = self._poll_timeout_ms if poll_timeout_ms is None else poll_timeout_ms
        try:
            fetched = self._consumer.poll(timeout_ms=timeout, max_records=10_000)
        except OffsetOutOfRangeError as exc:
            self._handle_out_of_range(exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {})
            return []
        for kafka_tp, records in fetched.items():
            state = self._changelogs.get(TopicPartition(kafka_tp.topic, kafka_tp.partition))
            if state is None or state.completed or not records:
                continue
            self._apply(state, records)
        completed: list[TaskId] = []
        for task_id, partitions in list(self._tasks.items()):
            for tp in partitions:
                state = self._changelogs[tp]
                if not state.completed and self._reached_end(state):
                    state.completed = True
                    self.listener.on_restore_end(tp, state.store_name, state.restored)
            if all(self._changelogs[tp].completed for tp in partitions):
                self._finish_task(task_id)
                completed.append(task_id)
        if completed:
            self._reassign()
        return completed

    def _apply(self, state: ChangelogState, records: list[Any]) -> None:
        end = state.end_offset
        if records[-1].offset >= end:
            records = [r for r in records if r.offset < end]
            if not records:
                return
        applied = state.state_manager.restore(state.partition, records)
        last = records[-1].offset
        state.position = last + 1
        state.restored += applied
        self.listener.on_batch_restored(state.partition, state.store_name, last, applied)

    def _reached_end(self, state: ChangelogState) -> bool:
        if state.position >= state.end_offset:
            return True
        # Transaction markers and compacted gaps have offsets but no records: ask the consumer.
        position = self._consumer.position(KafkaTopicPartition(*state.partition))
        if position is not None and position >= state.end_offset:
            state.position = position
            return True
        return False

    def _handle_out_of_range(self, offsets: dict) -> None:
        partitions = [TopicPartition(tp.topic, tp.partition) for tp in offsets] or \
            [tp for tp, s in self._changelogs.items() if not s.completed]
        begins = _by_partition(self._consumer.beginning_offsets(_kafka(partitions)))
        ends = _by_partition(self._consumer.end_offsets(_kafka(partitions)))
        for tp in partitions:
            state = self._changelogs.get(tp)
            if state is None:
                continue
            log.warning("task %s: changelog %s offset %d is out of range; wiping store %s and restoring it "
                        "from the beginning", state.task_id, tp, state.position, state.store_name)
            state.state_manager.wipe_store(state.store_name)
            state.start_offset = state.position = begins[tp]
            state.end_offset = ends[tp]
            state.restored = 0
            self._consumer.seek(KafkaTopicPartition(*tp), state.position)

    def _finish_task(self, task_id: TaskId) -> None:
        partitions = self._tasks.pop(task_id, [])
        manager = None
        for tp in partitions:
            state = self._changelogs.pop(tp)
            manager = state.state_manager
        if manager is not None:
            manager.checkpoint({}, force=True)

    def _reassign(self) -> None:
        """Point the restore consumer at exactly the partitions still restoring, at their
        tracked positions."""
        kafka_tps = _kafka(tp for tp, s in self._changelogs.items() if not s.completed)
        self._consumer.assign(kafka_tps)
        for tp in kafka_tps:
            self._consumer.seek(tp, self._changelogs[TopicPartition(tp.topic, tp.partition)].position)

    def close(self) -> None:
        for task_id in list(self._tasks):
            self.unregister(task_id)


def _kafka(partitions) -> list[KafkaTopicPartition]:
    """kafka-python's consumer accepts only its own TopicPartition type."""
    return [KafkaTopicPartition(tp[0], tp[1]) for tp in partitions]


def _by_partition(offsets: dict) -> dict[TopicPartition, int]:
    return {TopicPartition(tp.topic, tp.partition): offset for tp, offset in offsets.items()}
