"""TaskManager: the tasks one stream thread holds, from assignment to close.

The stream thread polls, decides when to commit and takes part in the group; the task
manager turns what the group decided into tasks and keeps them: it routes fetched records
to their task and pauses partitions whose buffer is full or whose task still restores,
processes the running tasks, applies an assignment (closes what left, keeps what stays,
promotes standbys that became active, creates the rest), suspends revoked tasks, closes
lost ones, and reports the changelog offset sums the group leader turns into lags.

Every change to which tasks are held, to a task's state, or to the changelog reader's
registrations happens under ``tasks_lock``; the status publisher copies the tasks under
it, so a status document never shows a task half-way (see ``stream_thread``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kafka import TopicPartition as KafkaTopicPartition

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import ChangelogLostError, CorruptCheckpointError, IllegalStateError
from airflow_stateful_provider.streams.kafka.positions import local_position
from airflow_stateful_provider.streams.processing.kafka_waits import KafkaWaits
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.records import OffsetAndMetadata
from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
from airflow_stateful_provider.streams.processing.task import StreamTask, TaskState
from airflow_stateful_provider.streams.restoration.changelog_loss import changelog_lost_error
from airflow_stateful_provider.streams.restoration.changelog_reader import ChangelogReader
from airflow_stateful_provider.streams.restoration.standby_task import StandbyTask
from airflow_stateful_provider.streams.snapshots.taking import SnapshotTaker
from airflow_stateful_provider.streams.state.common.checkpoint import OffsetCheckpoint
from airflow_stateful_provider.streams.state.common.rocksdb_memory import RocksDBMemory
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["RECORDS_PER_TASK_ITERATION", "TaskManager", "TaskOwner"]

log = logging.getLogger(__name__)

#: Records a task processes before the thread turns to the next task, punctuation and commit.
RECORDS_PER_TASK_ITERATION = 1000


class TaskOwner(Protocol):
    """What the task manager uses of its stream thread: its name, its clients (created
    when the thread starts) and its commit."""

    name: str
    consumer: Any
    producer: Any
    changelog_reader: ChangelogReader | None
    snapshot_taker: SnapshotTaker | None
    #: The instance's RocksDB memory budget (None: the process default).
    rocksdb_memory: RocksDBMemory | None
    #: Retries what the brokers cannot answer yet, up to the task timeout.
    kafka_waits: KafkaWaits

    def started_changelog_reader(self) -> ChangelogReader: ...

    def commit(self, tasks: Iterable[StreamTask] | None = None, *,
               enforce_checkpoint: bool = False) -> int | None: ...


class TaskManager:
    """The active and standby tasks of one stream thread (see module docstring)."""

    def __init__(self, owner: TaskOwner, topology: Topology, config: StreamsConfig,
                 wall_clock: Callable[[], int]) -> None:
        self._owner = owner
        self.topology = topology
        self.config = config
        self.wall_clock_ms = wall_clock
        self.tasks: dict[TaskId, StreamTask] = {}
        self.standby_tasks: dict[TaskId, StandbyTask] = {}
        #: Guards tasks, standby_tasks, their states and the reader's registrations as one
        #: view for the status publisher (see module docstring). Reentrant: close paths nest.
        self.tasks_lock = threading.RLock()
        #: Decorated source topic -> the subtopology that reads it.
        self.topic_to_subtopology: dict[str, int] = {}
        for sub in topology.subtopologies():
            for raw in sub.source_topics:
                self.topic_to_subtopology[topology.decorate_topic(raw, config.application_id)] = sub.id
        #: Input partitions paused: their task's buffer is full, or the task still restores.
        self.paused: set[TopicPartition] = set()
        self._revocation_tasks: list[StreamTask] = []
        #: Exactly-once: tasks closed by a rollback, to run again from their committed
        #: offsets (task id -> its input partitions); see close_running_for_revival.
        self.tasks_to_revive: dict[TaskId, list[TopicPartition]] = {}
        #: Where the next process() starts among the running tasks (see process).
        self._next_first = 0

    @property
    def name(self) -> str:
        return self._owner.name

    @property
    def consumer(self) -> Any:
        return self._owner.consumer

    @property
    def changelog_reader(self) -> ChangelogReader:
        return self._owner.started_changelog_reader()

    # ------------------------------------------------------------------ input

    def add_records(self, tp: TopicPartition, records: list[Any]) -> None:
        task = self.tasks.get(self.task_id_for(tp))
        if task is None or task.state is TaskState.CLOSED:
            log.warning("%s: dropping %d fetched records of %s: no task owns it", self.name, len(records), tp)
            return
        buffered = task.add_records(tp, records)
        if buffered >= self.config.buffered_records_per_partition and tp not in self.paused:
            self.consumer.pause(KafkaTopicPartition(tp.topic, tp.partition))
            self.paused.add(tp)

    def resume_drained_partitions(self) -> None:
        limit = self.config.buffered_records_per_partition
        for tp in list(self.paused):
            task_id = self.task_id_for(tp)
            task = self.tasks.get(task_id)
            if task is None:
                # A rolled-back task stays paused until revived. Otherwise the partition was
                # revoked, or its task dropped while the consumer keeps it (outside the group):
                # kafka-python keeps a kept partition's pause across the next assignment, so
                # it stays here until it is no longer assigned or a new task resumes it.
                if task_id not in self.tasks_to_revive and KafkaTopicPartition(*tp) not in self.consumer.assignment():
                    self.paused.discard(tp)
                continue
            if task.state is TaskState.RUNNING and task.buffered_size(tp) < limit // 2:
                self.consumer.resume(KafkaTopicPartition(tp.topic, tp.partition))
                self.paused.discard(tp)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            if tp not in self.paused:
                self.consumer.pause(KafkaTopicPartition(tp.topic, tp.partition))
                self.paused.add(tp)

    def task_id_for(self, tp: TopicPartition) -> TaskId:
        return TaskId(self.topic_to_subtopology[tp.topic], tp.partition)

    # ------------------------------------------------------------------ processing

    def running_tasks(self) -> list[StreamTask]:
        return [t for t in self.tasks.values() if t.state is TaskState.RUNNING]

    def has_processable(self) -> bool:
        now = self.wall_clock_ms()
        return any(t.is_processable(now) for t in self.running_tasks())

    def process(self, budget_ms: int) -> int:
        """Process up to RECORDS_PER_TASK_ITERATION records of each running task, for at most
        about ``budget_ms``: then the thread commits and polls again, however slow the
        processors are (a transaction left open past its timeout is aborted by the
        coordinator, and every task's work since the last commit with it). When the budget
        runs out, the next call starts with the tasks that were left out."""
        total = 0
        now = self.wall_clock_ms()
        deadline = time.monotonic() + budget_ms / 1000
        tasks = self.running_tasks()
        if tasks:
            start = self._next_first % len(tasks)
            tasks = tasks[start:] + tasks[:start]
        for index, task in enumerate(tasks):
            total += task.process_batch(now, RECORDS_PER_TASK_ITERATION, deadline)
            if time.monotonic() > deadline:
                self._next_first += index + 1
                break
        return total

    def uncommitted_bytes(self) -> int:
        """Exactly-once: memory held by the running tasks' buffered store writes."""
        return sum(_state_manager(t).uncommitted_bytes() for t in self.running_tasks())

    def restoration_completed(self, task_id: TaskId) -> None:
        task = self.tasks[task_id]
        task.complete_restoration()
        for tp in task.partitions:
            if tp in self.paused and task.buffered_size(tp) < self.config.buffered_records_per_partition:
                self.consumer.resume(KafkaTopicPartition(tp.topic, tp.partition))
                self.paused.discard(tp)
        log.info("%s: task %s restored and running", self.name, task_id)

    # ------------------------------------------------------------------ rebalance

    def prepare_revocation(self, revoked: Iterable[Any]) -> dict[TopicPartition, OffsetAndMetadata]:
        """Listener, IO thread, the stream thread blocked in poll: flush the revoked tasks and
        return the offsets to commit before the partitions are given up."""
        revoked_ids = {self.task_id_for(TopicPartition(tp.topic, tp.partition)) for tp in revoked}
        tasks = [self.tasks[t] for t in sorted(revoked_ids) if t in self.tasks]
        self._revocation_tasks = tasks
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for task in tasks:
            if task.state is TaskState.RUNNING and (task.commit_needed or task.commit_requested):
                offsets.update(task.prepare_commit())
        return offsets

    def complete_revocation(self, revoked: Iterable[Any]) -> None:
        """After the commit: checkpoint and suspend the revoked tasks (stores stay open in
        case the same tasks come back in the new assignment)."""
        with self.tasks_lock:
            for task in self._revocation_tasks:
                self.tasks_to_revive.pop(task.id, None)
                if task.state is TaskState.CLOSED:
                    continue  # rolled back by a failed transaction: nothing to keep
                if task.id in self.changelog_reader.restoring_tasks:
                    self.changelog_reader.unregister(task.id)
                elif task.state is TaskState.RUNNING:
                    task.post_commit(enforce_checkpoint=True)
                task.suspend()
        self._revocation_tasks = []
        for tp in revoked:
            self.paused.discard(TopicPartition(tp.topic, tp.partition))

    def handle_lost(self, lost: Iterable[Any]) -> None:
        """The member was evicted: another member may already own these tasks, so nothing
        is committed; the tasks are closed without a checkpoint (their next owner restores)."""
        lost_ids = {self.task_id_for(TopicPartition(tp.topic, tp.partition)) for tp in lost}
        for task_id in sorted(lost_ids):
            self.tasks_to_revive.pop(task_id, None)
            with self.tasks_lock:
                task = self.tasks.pop(task_id, None)
                if task is None:
                    continue
                if task_id in self.changelog_reader.restoring_tasks:
                    self.changelog_reader.unregister(task_id)
                task.close(clean=False)
            log.warning("%s: lost task %s (evicted from the group); closed without committing", self.name, task_id)
        self.paused.difference_update(TopicPartition(tp.topic, tp.partition) for tp in lost)

    def drop_active_tasks(self) -> None:
        """Close every active task without committing (this member is outside its group)."""
        self.tasks_to_revive.clear()
        with self.tasks_lock:
            for task_id in sorted(self.tasks):
                task = self.tasks.pop(task_id)
                if task_id in self.changelog_reader.restoring_tasks:
                    self.changelog_reader.unregister(task_id)
                task.close(clean=False)

    def close_running_for_revival(self) -> None:
        """Exactly-once rollback: close every running task without committing (its stores
        drop their buffered writes and stay at the last commit) and remember it, to run it
        again from its committed offsets (:meth:`revive_tasks`). Safe on the consumer's IO
        thread: local work only. Restoring and suspended tasks wrote nothing uncommitted."""
        with self.tasks_lock:
            for task in self.running_tasks():
                del self.tasks[task.id]
                task.close(clean=False)
                self.tasks_to_revive[task.id] = list(task.partitions)
                self.pause(task.partitions)  # until it runs again, from the committed offsets

    def revive_tasks(self) -> None:
        """Run the rolled-back tasks that are still assigned again: rewind their partitions
        to the committed offsets, reopen their stores and restore what the changelog holds
        beyond the stores' checkpoint."""
        assigned = {TopicPartition(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        for task_id, partitions in sorted(self.tasks_to_revive.items()):
            del self.tasks_to_revive[task_id]
            if task_id in self.tasks or not set(partitions) <= assigned:
                continue  # revoked or lost meanwhile
            self._start_active(task_id, partitions, rewind=True)
            log.info("%s: task %s runs again from its last commit", self.name, task_id)

    # ------------------------------------------------------------------ assignment

    def task_offset_sums(self) -> dict[TaskId, int]:
        """Per task with state on this process: the sum of its changelog positions (next
        offset to read), from checkpoint files; -2 for the actives this thread runs. The
        group leader turns them into lags (docs/semantics.md §3)."""
        sums: dict[TaskId, int] = {}
        app_dir = os.path.join(self.config.state_dir, self.config.application_id)
        try:
            entries = list(os.scandir(app_dir))
        except FileNotFoundError:
            entries = []
        for entry in entries:
            try:
                task_id = TaskId.parse(entry.name)
            except ValueError:
                continue
            try:
                offsets = OffsetCheckpoint.in_task_dir(entry.path).read()
            except (CorruptCheckpointError, OSError) as exc:
                log.warning("%s: ignoring the checkpoint of task %s for lag reporting: %s", self.name, task_id, exc)
                continue
            if offsets:
                sums[task_id] = sum(offset + 1 for offset in offsets.values() if offset >= 0)
        progress = self._owner.changelog_reader.progress() if self._owner.changelog_reader is not None else []
        for task_id in list(self.standby_tasks):
            positions = [state.position for state in progress if state.task_id == task_id]
            if positions:
                sums[task_id] = sum(positions)  # fresher than its last checkpoint
        for task_id, task in list(self.tasks.items()):
            if task.state is TaskState.RUNNING:
                sums[task_id] = -2
        return sums

    def handle_assignment(self, active: Mapping[TaskId, Iterable[Any]], standby: Mapping[TaskId, Any],
                          warmups: set[TaskId]) -> None:
        """Turn the group's decision into tasks: close what left, keep what stays, promote
        standbys that became active, create the rest."""
        reader = self.changelog_reader
        for task_id in sorted(set(self.tasks) - set(active)):
            task = self.tasks[task_id]
            # Moved away, but a copy stays here: keep the stores warm as a standby.
            keep_standby = task_id in standby and task.state is not TaskState.CLOSED
            if keep_standby and task.state is TaskState.RUNNING:
                self._owner.commit([task], enforce_checkpoint=True)
                if task_id not in self.tasks:  # exactly-once: the commit failed and rolled it back
                    self.tasks_to_revive.pop(task_id, None)
                    continue
            with self.tasks_lock:
                del self.tasks[task_id]
                if task_id in reader.restoring_tasks:
                    reader.unregister(task_id)
                if keep_standby:
                    task.suspend()
                else:
                    task.close(clean=True)
            if keep_standby:
                self._add_standby(task_id, _state_manager(task), task.record_collector, warmup=task_id in warmups)
            else:
                log.info("%s: closed task %s (no longer assigned)", self.name, task_id)
        for task_id in sorted(set(self.standby_tasks) - set(standby) - set(active)):
            with self.tasks_lock:
                reader.unregister(task_id)
                self.standby_tasks.pop(task_id).close(clean=True)
            log.info("%s: closed standby %s (no longer assigned)", self.name, task_id)

        for task_id in sorted(set(self.tasks_to_revive) - set(active)):
            del self.tasks_to_revive[task_id]
        new_tasks = self._open_new_tasks({task_id: partitions for task_id, partitions in active.items()
                                          if task_id not in self.tasks and task_id not in self.standby_tasks})
        # Tasks whose changelog lost their stores' state are not started; the others of the
        # assignment are still checked, so one error (and the status) names every lost task.
        lost: list[ChangelogLostError] = []
        try:
            for task_id, partitions in sorted(active.items()):
                current = self.tasks.get(task_id)
                if current is not None and current.state is not TaskState.SUSPENDED:
                    continue  # unchanged: never revoked under the cooperative protocol
                try:
                    self._start_active(task_id, sorted(TopicPartition(tp.topic, tp.partition) for tp in partitions),
                                       rewind=self.tasks_to_revive.pop(task_id, None) is not None,
                                       opened=new_tasks.pop(task_id, None))
                except ChangelogLostError as exc:
                    lost.append(exc)
        finally:
            for task in new_tasks.values():  # not started: a start before them failed
                task.close(clean=False)

        for task_id in sorted(standby):
            if task_id in active:
                continue
            existing = self.standby_tasks.get(task_id)
            if existing is not None:
                existing.warmup = task_id in warmups
                continue
            collector, stores = self._new_stores(task_id)
            reader.prepare_stores(task_id, stores)
            stores.initialize()
            try:
                self._add_standby(task_id, stores, collector, warmup=task_id in warmups)
            except ChangelogLostError as exc:
                lost.append(exc)
        if lost:
            raise changelog_lost_error([entry for exc in lost for entry in exc.lost])

    def _open_new_tasks(self, assigned: Mapping[TaskId, Iterable[Any]]) -> dict[TaskId, StreamTask]:
        """Create the newly assigned tasks and open their stores, all before any of them
        registers for restoration: the changelogs of all of them are then fetched together
        from the first restore poll on, instead of the first task's restoration waiting
        while the stores of the others open."""
        opened: dict[TaskId, StreamTask] = {}
        try:
            for task_id, partitions in sorted(assigned.items()):
                task = self._create_task(task_id, sorted(TopicPartition(tp.topic, tp.partition) for tp in partitions))
                opened[task_id] = task
                self._open_stores(task_id, task)
        except BaseException:
            for task in opened.values():
                task.close(clean=False)  # not in tasks yet: nobody else would close their stores
            raise
        return opened

    def _open_stores(self, task_id: TaskId, task: StreamTask) -> None:
        """A new task's state from local files, a snapshot or (left to restoration) the
        changelog, then its stores opened: a loaded snapshot replaces their directories."""
        self.changelog_reader.prepare_stores(task_id, _state_manager(task))
        task.initialize()

    def _start_active(self, task_id: TaskId, partitions: list[TopicPartition], *, rewind: bool = False,
                      opened: StreamTask | None = None) -> None:
        """Run ``task_id`` here: resume it (it was suspended), promote its standby, or create
        it. Its changelog offsets are looked up before the task enters ``tasks``, so the
        status publisher never sees it restoring without its restoration progress.
        ``rewind``: the consumer read past the committed offsets (a rolled-back task), so
        seek its partitions back to them. ``opened``: the task, created with its stores
        open (:meth:`_open_new_tasks`)."""
        reader = self.changelog_reader
        committed = {tp: self._owner.kafka_waits.retried("committed", "the group coordinator", self.consumer.committed,
                                                         KafkaTopicPartition(*tp), metadata=True)
                     for tp in partitions}
        if rewind:
            for tp, offset in committed.items():
                if offset is None or offset.offset < 0:
                    self.consumer.seek_to_beginning(KafkaTopicPartition(*tp))
                else:
                    self.consumer.seek(KafkaTopicPartition(*tp), offset.offset)
        suspended = self.tasks.get(task_id)
        standby = self.standby_tasks.get(task_id)
        if suspended is not None:
            task = suspended
            reader.keeps_local_state(task_id)
            restored = reader.register(task_id, _state_manager(task))
        elif standby is not None:
            task = self._create_task(task_id, partitions, (standby.collector, standby.stores))
            task.initialize()
            restored = reader.promote(task_id)
        else:
            task = opened if opened is not None else self._create_task(task_id, partitions)
            try:
                if opened is None:
                    self._open_stores(task_id, task)
                restored = reader.register(task_id, _state_manager(task))
            except BaseException:
                task.close(clean=False)  # not in tasks yet: nobody else would close its stores
                raise
        task.initialize_task_time(committed)
        with self.tasks_lock:
            if suspended is not None:
                task.resume()
            elif standby is not None:
                self.standby_tasks.pop(task_id).release_stores()
                log.info("%s: standby %s promoted to active", self.name, task_id)
            self.tasks[task_id] = task
            if restored:
                self.restoration_completed(task_id)
        if not restored:
            self.pause(partitions)

    def _add_standby(self, task_id: TaskId, stores: TaskStateManager, collector: RecordCollector, *,
                     warmup: bool) -> None:
        """Keep ``stores`` updated from their changelogs; visible to the status publisher once
        their changelog positions are known."""
        try:
            self.changelog_reader.register_standby(task_id, stores)
        except BaseException:
            stores.close()
            raise
        with self.tasks_lock:
            self.standby_tasks[task_id] = StandbyTask(task_id, stores, collector, warmup=warmup)

    def _new_stores(self, task_id: TaskId) -> tuple[RecordCollector, TaskStateManager]:
        """A task's stores and the collector their changelog writes go through (a standby
        never writes, but keeps the collector for when it is promoted)."""
        collector = RecordCollector(self._owner.producer, task_id=task_id)
        return collector, TaskStateManager(task_id, self.topology, self.config, record_collector=collector,
                                           rocksdb_memory=self._owner.rocksdb_memory)

    def _create_task(self, task_id: TaskId, partitions: list[TopicPartition],
                     built: tuple[RecordCollector, TaskStateManager] | None = None) -> StreamTask:
        """An active task over ``built`` (a promoted standby's collector and stores) or new ones."""
        collector, stores = built if built is not None else self._new_stores(task_id)
        return StreamTask(task_id, self.topology, self.config, record_collector=collector, stores=stores,
                          partitions=partitions, wall_clock=self.wall_clock_ms,
                          consumer_position=self._consumer_position)

    def _consumer_position(self, tp: TopicPartition) -> int | None:
        """The main consumer's next offset of ``tp``, read from its local state (no network:
        safe inside rebalance callbacks), or None when it has no valid position."""
        return local_position(self.consumer, tp.topic, tp.partition)

    def snapshot_committed(self, tasks: Iterable[StreamTask]) -> None:
        """Right after ``tasks`` committed: let the snapshot taker checkpoint the running ones
        whose snapshot is due (the upload runs on its own thread)."""
        taker = self._owner.snapshot_taker
        if taker is None:
            return
        for task in tasks:
            if task.state is TaskState.RUNNING:
                stores = _state_manager(task)
                taker.after_commit(task.id, stores.task_dir, stores.snapshot_stores())

    def snapshot_idle(self) -> None:
        """After a commit round: running tasks with nothing uncommitted (their stores hold
        their last commit) take a snapshot that came due while the previous one uploaded."""
        taker = self._owner.snapshot_taker
        if taker is None:
            return
        for task in self.running_tasks():
            if not task.commit_needed and not task.commit_requested:
                stores = _state_manager(task)
                taker.after_commit(task.id, stores.task_dir, stores.snapshot_stores(), count_commit=False)

    # ------------------------------------------------------------------ close

    def close(self, *, clean: bool) -> None:
        """Close every task (committed before, by the thread, when clean) and, when clean,
        the changelog reader."""
        with self.tasks_lock:
            if self._owner.changelog_reader is not None and clean:
                self._owner.changelog_reader.close()
            closing: list[StreamTask | StandbyTask] = [*self.tasks.values(), *self.standby_tasks.values()]
            for task in closing:
                try:
                    task.close(clean=clean)
                except Exception:  # close the other tasks too
                    log.exception("%s: error closing task %s", self.name, task.id)
            self.tasks.clear()
            self.standby_tasks.clear()


def _state_manager(task: StreamTask) -> TaskStateManager:
    """The stores of a task this manager created: always a TaskStateManager (_new_stores)."""
    stores = task.stores
    if not isinstance(stores, TaskStateManager):
        raise IllegalStateError(f"task {task.id} has stores of type {type(stores).__name__}, not a TaskStateManager")
    return stores
