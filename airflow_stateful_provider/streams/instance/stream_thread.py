"""StreamThread: one consumer-group member running its assigned tasks.

Each iteration of the loop: poll the consumer (rebalances happen inside the poll), hand
the records to their tasks, restore the stores of tasks that are not yet restored (each
task starts processing as soon as its *own* stores are restored), process buffered
records in timestamp order, fire punctuations, and commit when the commit interval has
passed or a processor asked for it.

Commit (at-least-once): flush stores, flush the producer, commit input offsets, then
write the checkpoint. On revocation the same happens before the partitions are given up.

kafka-python 3 runs rebalance callbacks on the consumer's IO thread while this thread
is blocked inside ``poll()``; blocking consumer calls are refused there. Revocation
(which must commit before the rebalance proceeds) therefore uses an async listener that
awaits the offset commit. The group's assignor (``StreamsPartitionAssignor``, cooperative
protocol: tasks that stay are never revoked) hands each member its active, standby and
warmup tasks and the time of the next probing rebalance; the assignor only records them,
and this thread applies them once ``poll()`` returns: it closes what left, promotes
standbys that became active (keeping their stores), creates the rest, and requests the
probing rebalance when it is due.

The status publisher reads this thread's tasks from another thread. Every change to which
tasks the thread holds, to a task's state, or to the changelog reader's registrations
happens under ``tasks_lock``, and the publisher copies them under it, so a status document
never shows a task half-way: a task is visible as restoring only once its changelog
offsets are known, and only until it runs. The lock covers local work only; offset
look-ups and polls happen outside it, so a slow broker never holds up status publication.
"""

from __future__ import annotations

import collections
import enum
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from kafka import TopicPartition as KafkaTopicPartition
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata as KafkaOffsetAndMetadata

from airflow_stateful_provider.streams.assignment.assignment_info import AssignmentInfo, AssignorError
from airflow_stateful_provider.streams.assignment.streams_partition_assignor import (
    REBALANCE_POLL_MS,
    AssignorContext,
    StreamsPartitionAssignor,
    group_rejoining,
    request_rebalance,
)
from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import CorruptCheckpointError, StreamsError
from airflow_stateful_provider.streams.instance.group_join import keep_completed_join_results
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.records import OffsetAndMetadata, TopicPartition
from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
from airflow_stateful_provider.streams.processing.task import StreamTask, TaskState
from airflow_stateful_provider.streams.restoration.changelog_reader import (
    ChangelogReader,
    StandbyUpdateListener,
    StateRestoreListener,
)
from airflow_stateful_provider.streams.restoration.standby_task import StandbyTask
from airflow_stateful_provider.streams.state.checkpoint import OffsetCheckpoint
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["StreamThread", "StreamThreadState"]

log = logging.getLogger(__name__)

#: Records a task processes before the thread turns to the next task, punctuation and commit.
RECORDS_PER_TASK_ITERATION = 1000
#: Bound of the group leader's changelog end-offset lookup (see _assignor_context).
LEADER_END_OFFSETS_TIMEOUT_MS = 5_000
#: Longest poll while there is nothing to process or restore.
IDLE_POLL_MS = 100


class StreamThreadState(enum.Enum):
    CREATED = "CREATED"
    STARTING = "STARTING"
    PARTITIONS_REVOKED = "PARTITIONS_REVOKED"
    PARTITIONS_ASSIGNED = "PARTITIONS_ASSIGNED"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    DEAD = "DEAD"


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class _RebalanceListener(AsyncConsumerRebalanceListener):
    def __init__(self, thread: StreamThread) -> None:
        self._thread = thread

    async def on_partitions_revoked(self, revoked):
        offsets = self._thread._prepare_revocation(revoked)
        if offsets:
            try:
                await self._thread.consumer.commit_async(offsets)
            except Exception as exc:  # noqa: BLE001 - the records are reprocessed (at-least-once)
                log.warning("%s: offset commit on revocation failed (%r); uncommitted records will be "
                            "processed again by the next owner", self._thread.name, exc)
        self._thread._complete_revocation(revoked)

    async def on_partitions_assigned(self, assigned):
        pass  # the assignor's on_assignment carries the whole assignment (tasks, not partitions)

    async def on_partitions_lost(self, lost):
        self._thread._lose_partitions(lost)


class StreamThread(threading.Thread):
    """Runs the tasks the consumer group assigns to this member (see module docstring)."""

    def __init__(
        self,
        index: int,
        topology: Topology,
        config: StreamsConfig,
        *,
        client_id: str,
        consumer_factory: Callable[..., Any],
        producer_factory: Callable[..., Any],
        admin_factory: Callable[[], Any] | None = None,
        process_id: uuid.UUID | None = None,
        restore_listener: StateRestoreListener | None = None,
        standby_listener: StandbyUpdateListener | None = None,
        on_state_change: Callable[[StreamThread, StreamThreadState, StreamThreadState], None] | None = None,
        on_error: Callable[[StreamThread, BaseException], None] | None = None,
        wall_clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        super().__init__(name=f"{client_id}-StreamThread-{index}", daemon=True)
        self.index = index
        self.topology = topology
        self.config = config
        self.client_id = client_id
        self._consumer_factory = consumer_factory
        self._producer_factory = producer_factory
        self._admin_factory = admin_factory
        self._admin: Any = None
        self._restore_listener = restore_listener
        self._standby_listener = standby_listener
        #: The instance's id in the group protocol: all threads of one instance share it.
        self.process_id = process_id or uuid.uuid4()
        self._on_state_change = on_state_change
        self._on_error = on_error
        self.wall_clock_ms = wall_clock
        self.state = StreamThreadState.CREATED
        self._state_lock = threading.Lock()
        self._shutdown_requested = threading.Event()
        self.tasks: dict[TaskId, StreamTask] = {}
        self.standby_tasks: dict[TaskId, StandbyTask] = {}
        #: Guards tasks, standby_tasks, their states and the reader's registrations as one
        #: view for the status publisher (see module docstring). Reentrant: close paths nest.
        self.tasks_lock = threading.RLock()
        #: Wall-clock ms at which to trigger the next rebalance (probing or follow-up), or None.
        self.next_probing_rebalance_ms: int | None = None
        self._topic_to_subtopology: dict[str, int] = {}
        for sub in topology.subtopologies():
            for raw in sub.source_topics:
                self._topic_to_subtopology[topology.decorate_topic(raw, config.application_id)] = sub.id
        self._repartition_topics = {topology.decorate_topic(raw, config.application_id)
                                    for raw, kind in topology.internal_topics.items() if kind == "repartition"}
        #: Committed offsets of repartition partitions not yet purged.
        self._purgeable: dict[TopicPartition, int] = {}
        self._last_purge_ms = 0
        self._pending_assignment: AssignmentInfo | None = None
        #: Set when the group refused a commit because it is rebalancing; cleared by the
        #: next assignment. A failed commit makes kafka-python rejoin, so retrying it
        #: before the rebalance completes would restart the rebalance again and again.
        self._commit_blocked = False
        #: When commits started being refused (monotonic s); see _recover_if_outside_group.
        self._commit_blocked_since: float | None = None
        self._revocation_tasks: list[StreamTask] = []
        self._paused: set[TopicPartition] = set()
        self._last_commit_ms = 0
        self.consumer: Any = None
        self.restore_consumer: Any = None
        self.producer: Any = None
        self.changelog_reader: ChangelogReader | None = None
        self.error: BaseException | None = None
        #: time.monotonic() of the first poll that returned records, and of the last commit
        #: (benchmarks measure processing throughput between the two).
        self.first_records_polled_at: float | None = None
        self.last_committed_at: float | None = None
        #: Actions (control commands) waiting for the next safe point; see run_at_safe_point.
        self._safe_point_actions: collections.deque[tuple[Callable[[StreamThread], Any], Future]] = \
            collections.deque()
        self._safe_point_lock = threading.Lock()
        self._safe_point_closed = False

    # ------------------------------------------------------------------ state

    def _set_state(self, new: StreamThreadState) -> None:
        with self._state_lock:
            old, self.state = self.state, new
        if old is not new:
            log.info("%s: %s -> %s", self.name, old.value, new.value)
            if self._on_state_change is not None:
                self._on_state_change(self, new, old)

    def shutdown(self) -> None:
        """Ask the thread to finish its iteration, commit, close its tasks and exit."""
        self._shutdown_requested.set()

    def run_at_safe_point(self, action: Callable[[StreamThread], Any]) -> Future:
        """Run ``action(self)`` in this thread at the end of a loop iteration: outside
        ``poll()`` and its rebalance callbacks, and not while the group rebalances or
        refuses commits (it waits for the next iteration then), so the action sees a
        stable set of tasks and may commit. The future gets its result or exception; it
        fails if the thread stops first."""
        future: Future = Future()
        with self._safe_point_lock:
            if self._safe_point_closed:
                future.set_exception(StreamsError(f"{self.name} has stopped; the action was not applied"))
            else:
                self._safe_point_actions.append((action, future))
        return future

    def _run_safe_point_actions(self) -> None:
        if self._commit_blocked or group_rejoining(self.consumer):
            return  # mid-rebalance: the next iteration after it
        while self._safe_point_actions:
            with self._safe_point_lock:
                action, future = self._safe_point_actions.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = action(self)
            except Exception as exc:  # noqa: BLE001 - reported through the future; the thread runs on
                log.warning("%s: control action failed: %r", self.name, exc)
                future.set_exception(exc)
            else:
                future.set_result(result)

    def _fail_safe_point_actions(self) -> None:
        with self._safe_point_lock:
            self._safe_point_closed = True
            pending = list(self._safe_point_actions)
            self._safe_point_actions.clear()
        for _, future in pending:
            if future.set_running_or_notify_cancel():
                future.set_exception(StreamsError(f"{self.name} stopped before it applied the action"))

    # ------------------------------------------------------------------ run

    def run(self) -> None:
        clean = False
        try:
            self._set_state(StreamThreadState.STARTING)
            self._create_clients()
            self._run_loop()
            clean = True
        except BaseException as exc:  # noqa: BLE001 - reported to the instance, which decides
            self.error = exc
            log.exception("%s failed", self.name)
        finally:
            self._set_state(StreamThreadState.PENDING_SHUTDOWN)
            self._close(clean=clean)
            self._set_state(StreamThreadState.DEAD)
            if self.error is not None and self._on_error is not None:
                self._on_error(self, self.error)

    def _create_clients(self) -> None:
        prefix = f"{self.client_id}-StreamThread-{self.index}"
        self.producer = self._producer_factory(client_id=f"{prefix}-producer")
        # A short fetch wait: the restore consumer also answers the group leader's end-offset
        # queries, which would otherwise wait behind an idle fetch for up to 500 ms.
        self.restore_consumer = self._consumer_factory(
            client_id=f"{prefix}-restore-consumer", group_id=None, auto_offset_reset="none",
            enable_auto_commit=False, fetch_max_wait_ms=100)
        static = {} if self.config.group_instance_id is None else \
            {"group_instance_id": f"{self.config.group_instance_id}-{self.index}"}
        self.consumer = self._consumer_factory(
            client_id=f"{prefix}-consumer", group_id=self.config.application_id, auto_offset_reset="earliest",
            enable_auto_commit=False, partition_assignment_strategy=[StreamsPartitionAssignor(self._assignor_context())],
            **static)
        # kafka-python 3.0.12 loses joins that finish after the poll that started them
        # returned, and can leave a leader's join unfinished (runtime/group_join.py).
        keep_completed_join_results(self.consumer)
        self.changelog_reader = ChangelogReader(self.restore_consumer, self._restore_listener, self._standby_listener)
        topics = sorted(self._topic_to_subtopology)
        # Load the topics' metadata first: a member that joins without it is assigned
        # nothing, and a second rebalance follows as soon as the metadata arrives.
        for topic in topics:
            self.consumer.partitions_for_topic(topic)
        self.consumer.subscribe(topics, listener=_RebalanceListener(self))

    def _run_loop(self) -> None:
        self._last_commit_ms = self.wall_clock_ms()
        while not self._shutdown_requested.is_set():
            self.run_once()

    def run_once(self) -> None:
        """One iteration of the loop (see module docstring)."""
        reader = self.changelog_reader
        busy = bool(reader.restoring_tasks) or self._has_processable()
        # An idle thread with standbys splits its wait between the two consumers.
        idle_wait = IDLE_POLL_MS // 2 if reader.standby_tasks else IDLE_POLL_MS
        # While the group rebalances, give the join its round trip (see REBALANCE_POLL_MS).
        timeout = REBALANCE_POLL_MS if group_rejoining(self.consumer) else (0 if busy else idle_wait)
        fetched = self.consumer.poll(timeout_ms=timeout, max_records=self.config.buffered_records_per_partition)
        if self._pending_assignment is not None:
            info, self._pending_assignment = self._pending_assignment, None
            self._apply_assignment(info)
        if fetched and self.first_records_polled_at is None:
            self.first_records_polled_at = time.monotonic()
        for kafka_tp, records in fetched.items():
            self._add_records(TopicPartition(kafka_tp.topic, kafka_tp.partition), records)
        if reader.restoring_tasks or reader.standby_tasks:
            wait = 0 if self._has_processable() else (50 if reader.restoring_tasks else idle_wait)
            fetched = reader.poll(poll_timeout_ms=wait)
            with self.tasks_lock:
                for task_id in reader.apply(fetched):
                    self._restoration_completed(task_id)
        self._process()
        now = self.wall_clock_ms()
        for task in self._running_tasks():
            task.maybe_punctuate_system_time()
        self._maybe_commit(now)
        self._maybe_purge_repartition_topics(now)
        self._maybe_request_rebalance(now)
        self._resume_drained_partitions()
        if self._safe_point_actions:
            self._run_safe_point_actions()
        if self.state is StreamThreadState.PARTITIONS_ASSIGNED and not reader.restoring_tasks:
            self._set_state(StreamThreadState.RUNNING)

    # ------------------------------------------------------------------ input

    def _add_records(self, tp: TopicPartition, records: list[Any]) -> None:
        task = self.tasks.get(self._task_id_for(tp))
        if task is None or task.state is TaskState.CLOSED:
            log.warning("%s: dropping %d fetched records of %s: no task owns it", self.name, len(records), tp)
            return
        buffered = task.add_records(tp, records)
        if buffered >= self.config.buffered_records_per_partition and tp not in self._paused:
            self.consumer.pause(KafkaTopicPartition(tp.topic, tp.partition))
            self._paused.add(tp)

    def _resume_drained_partitions(self) -> None:
        limit = self.config.buffered_records_per_partition
        for tp in list(self._paused):
            task = self.tasks.get(self._task_id_for(tp))
            if task is None:
                self._paused.discard(tp)
                continue
            if task.state is TaskState.RUNNING and task.buffered_size(tp) < limit // 2:
                self.consumer.resume(KafkaTopicPartition(tp.topic, tp.partition))
                self._paused.discard(tp)

    def _task_id_for(self, tp: TopicPartition) -> TaskId:
        return TaskId(self._topic_to_subtopology[tp.topic], tp.partition)

    # ------------------------------------------------------------------ processing

    def _running_tasks(self) -> list[StreamTask]:
        return [t for t in self.tasks.values() if t.state is TaskState.RUNNING]

    def _has_processable(self) -> bool:
        now = self.wall_clock_ms()
        return any(t.is_processable(now) for t in self._running_tasks())

    def _process(self) -> int:
        total = 0
        now = self.wall_clock_ms()
        for task in self._running_tasks():
            done = 0
            while done < RECORDS_PER_TASK_ITERATION and task.is_processable(now) and task.process(now):
                task.maybe_punctuate_stream_time()
                done += 1
            total += done
        return total

    # ------------------------------------------------------------------ commit

    def _block_commits(self) -> None:
        self._commit_blocked = True
        if self._commit_blocked_since is None:
            self._commit_blocked_since = time.monotonic()

    def _recover_if_outside_group(self) -> None:
        """A member whose commits stay refused for longer than the session timeout, with no
        new assignment arriving, is no longer in the group: kafka-python 3.0.12 can finish a
        join after the poll that started it gave up and then believe it needs no rejoin,
        with heartbeats off. Its tasks belong to other members by now, so processing them
        would duplicate output and write the same changelogs twice: drop them without
        committing (their next owner reprocesses from the last commit) and rejoin."""
        since = self._commit_blocked_since
        limit = self.consumer.config.get("session_timeout_ms", 45_000) / 1000 + 5
        if since is None or time.monotonic() - since < limit:
            return
        log.error("%s: commits refused for %.0f s without a new assignment: this member is outside its group; "
                  "dropping its active tasks without committing and rejoining", self.name, time.monotonic() - since)
        with self.tasks_lock:
            for task_id in sorted(self.tasks):
                task = self.tasks.pop(task_id)
                if task_id in self.changelog_reader.restoring_tasks:
                    self.changelog_reader.unregister(task_id)
                task.close(clean=False)
        # Rewind to the last commits and fetch nothing until the new assignment: if these
        # partitions come back, their records since the commit are processed again, not skipped.
        assigned = list(self.consumer.assignment())
        for kafka_tp in assigned:
            committed = self.consumer.committed(kafka_tp)
            if committed is None or committed < 0:
                self.consumer.seek_to_beginning(kafka_tp)
            else:
                self.consumer.seek(kafka_tp, committed)
        self._pause([TopicPartition(tp.topic, tp.partition) for tp in assigned])
        self._commit_blocked_since = time.monotonic()  # give the rejoin a full period
        request_rebalance(self.consumer)

    def _maybe_commit(self, now: int) -> None:
        if self._commit_blocked:
            self._recover_if_outside_group()
            return
        requested = any(t.commit_requested for t in self.tasks.values())
        if not requested and now - self._last_commit_ms < self.config.commit_interval_ms:
            return
        if self.commit() is None:
            return  # the group is rebalancing: commit once the new assignment arrives
        for standby in self.standby_tasks.values():
            standby.checkpoint()
        self._last_commit_ms = now

    def commit(self, tasks: Iterable[StreamTask] | None = None, *, enforce_checkpoint: bool = False) -> int | None:
        """Commit the running tasks that processed or punctuated since their last commit.
        Returns how many offsets were committed, or None when the group refused the commit
        because it is rebalancing (the tasks stay "commit needed" and the caller retries)."""
        from kafka.errors import (
            CommitFailedError,
            IllegalGenerationError,
            RebalanceInProgressError,
            UnknownMemberIdError,
        )

        tasks = [t for t in (self._running_tasks() if tasks is None else tasks)
                 if t.commit_needed or t.commit_requested or enforce_checkpoint]
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for task in tasks:
            offsets.update(task.prepare_commit())
        if offsets:
            try:
                self.consumer.commit(_kafka_offsets(offsets))
            except RebalanceInProgressError:
                # Cooperative rebalancing: tasks keep running meanwhile; commit after it.
                log.info("%s: commit deferred until the rebalance completes", self.name)
                self._block_commits()
                return None
            except (CommitFailedError, IllegalGenerationError, UnknownMemberIdError) as exc:
                # This member's generation is gone (e.g. evicted): its tasks are about to be
                # reported lost and their uncommitted records reprocessed by their next owner.
                log.warning("%s: commit rejected by the group (%s); uncommitted records will be processed "
                            "again", self.name, type(exc).__name__)
                self._block_commits()
                return None
            self.last_committed_at = time.monotonic()
            for tp, om in offsets.items():
                if tp.topic in self._repartition_topics:
                    self._purgeable[tp] = om.offset
        for task in tasks:
            task.post_commit(enforce_checkpoint=enforce_checkpoint)
        return len(offsets)

    def _maybe_purge_repartition_topics(self, now: int) -> None:
        """Delete repartition records below the committed offsets: this application is
        their only reader, and it will never read them again."""
        interval = self.config.repartition_purge_interval_ms
        if not self._purgeable or now - self._last_purge_ms < interval:
            return
        self._last_purge_ms = now
        if self._admin_factory is None:
            return
        purge, self._purgeable = self._purgeable, {}
        try:
            if self._admin is None:
                self._admin = self._admin_factory()
            self._admin.delete_records({KafkaTopicPartition(tp.topic, tp.partition): offset
                                        for tp, offset in purge.items()})
        except Exception as exc:  # noqa: BLE001 - purging is housekeeping; retry next interval
            log.warning("%s: purging repartition topics failed (%r); retrying in %d ms", self.name, exc, interval)
            for tp, offset in purge.items():
                self._purgeable.setdefault(tp, offset)

    # ------------------------------------------------------------------ rebalance

    def _prepare_revocation(self, revoked: Iterable[Any]) -> dict:
        """Listener, IO thread, this thread blocked in poll: flush the revoked tasks and
        return the offsets to commit before the partitions are given up."""
        if self.state is not StreamThreadState.PENDING_SHUTDOWN:
            self._set_state(StreamThreadState.PARTITIONS_REVOKED)
        revoked_ids = {self._task_id_for(TopicPartition(tp.topic, tp.partition)) for tp in revoked}
        tasks = [self.tasks[t] for t in sorted(revoked_ids) if t in self.tasks]
        self._revocation_tasks = tasks
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for task in tasks:
            if task.state is TaskState.RUNNING and (task.commit_needed or task.commit_requested):
                offsets.update(task.prepare_commit())
        return _kafka_offsets(offsets)

    def _complete_revocation(self, revoked: Iterable[Any]) -> None:
        """After the commit: checkpoint and suspend the revoked tasks (stores stay open in
        case the same tasks come back in the new assignment)."""
        with self.tasks_lock:
            for task in self._revocation_tasks:
                if task.id in self.changelog_reader.restoring_tasks:
                    self.changelog_reader.unregister(task.id)
                elif task.state is TaskState.RUNNING:
                    task.post_commit(enforce_checkpoint=True)
                task.suspend()
        self._revocation_tasks = []
        for tp in revoked:
            self._paused.discard(TopicPartition(tp.topic, tp.partition))

    def _lose_partitions(self, lost: Iterable[Any]) -> None:
        """The member was evicted: another member may already own these tasks, so nothing
        is committed; the tasks are closed without a checkpoint (their next owner restores)."""
        lost_ids = {self._task_id_for(TopicPartition(tp.topic, tp.partition)) for tp in lost}
        for task_id in sorted(lost_ids):
            with self.tasks_lock:
                task = self.tasks.pop(task_id, None)
                if task is None:
                    continue
                if task_id in self.changelog_reader.restoring_tasks:
                    self.changelog_reader.unregister(task_id)
                task.close(clean=False)
            log.warning("%s: lost task %s (evicted from the group); closed without committing", self.name, task_id)
        self._paused.difference_update(TopicPartition(tp.topic, tp.partition) for tp in lost)

    # ------------------------------------------------------------------ assignment

    def _assignor_context(self) -> AssignorContext:
        return AssignorContext(
            process_id=self.process_id, application_id=self.config.application_id, topology=self.topology,
            # Runs on the consumer's IO thread (heartbeats wait): bounded well below the session
            # timeout; on timeout the leader assigns by ownership and rebalances again later.
            fetch_end_offsets=lambda partitions: self.restore_consumer.end_offsets(
                list(partitions), timeout_ms=LEADER_END_OFFSETS_TIMEOUT_MS),
            on_assignment=self._on_assignment, configs=self.config.assignment_configs(),
            client_tags=self.config.client_tags, endpoint=self.config.application_server,
            previous_active_tasks=lambda: [t for t, task in list(self.tasks.items())
                                           if task.state is not TaskState.CLOSED],
            previous_standby_tasks=lambda: list(self.standby_tasks),
            task_offset_sums=self._task_offset_sums, owned_partitions=lambda: self.consumer.assignment(),
            clock_ms=self.wall_clock_ms)

    def _on_assignment(self, info: AssignmentInfo, partitions: frozenset) -> None:
        """Assignor callback (consumer IO thread, inside poll): record it for the loop."""
        self._pending_assignment = info
        self._commit_blocked = False
        self._commit_blocked_since = None

    def _task_offset_sums(self) -> dict[TaskId, int]:
        """Per task with state on this process: the sum of its changelog positions (next
        offset to read), from checkpoint files; -2 for the actives this thread runs. The
        group leader turns them into lags (SEMANTICS §3)."""
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
        progress = self.changelog_reader.progress() if self.changelog_reader is not None else []
        for task_id in list(self.standby_tasks):
            positions = [state.position for state in progress if state.task_id == task_id]
            if positions:
                sums[task_id] = sum(positions)  # fresher than its last checkpoint
        for task_id, task in list(self.tasks.items()):
            if task.state is TaskState.RUNNING:
                sums[task_id] = -2
        return sums

    def _apply_assignment(self, info: AssignmentInfo) -> None:
        """Turn the group's decision into tasks: close what left, keep what stays, promote
        standbys that became active, create the rest (see module docstring)."""
        if info.error_code == AssignorError.ASSIGNMENT_ERROR:
            raise StreamsError(f"{self.name}: the group leader could not assign tasks (see the leader's log); "
                               f"check that the source topics of each subtopology are co-partitioned")
        if info.error_code == AssignorError.SHUTDOWN_REQUESTED:
            log.error("%s: a member of the group requested the application to shut down", self.name)
            self.shutdown()
            return
        if info.error_code == AssignorError.INCOMPLETE_SOURCE_TOPIC_METADATA:
            log.warning("%s: the group leader did not know the partitions of a source topic; no tasks until "
                        "its metadata arrives", self.name)
        reader = self.changelog_reader
        active, standby, warmups = dict(info.active_tasks), dict(info.standby_tasks), set(info.warmup_tasks)
        self._set_state(StreamThreadState.PARTITIONS_ASSIGNED)

        for task_id in sorted(set(self.tasks) - set(active)):
            task = self.tasks[task_id]
            # Moved away, but a copy stays here: keep the stores warm as a standby.
            keep_standby = task_id in standby and task.state is not TaskState.CLOSED
            if keep_standby and task.state is TaskState.RUNNING:
                self.commit([task], enforce_checkpoint=True)
            with self.tasks_lock:
                del self.tasks[task_id]
                if task_id in reader.restoring_tasks:
                    reader.unregister(task_id)
                if keep_standby:
                    task.suspend()
                else:
                    task.close(clean=True)
            if keep_standby:
                self._add_standby(task_id, task.stores, task.record_collector, warmup=task_id in warmups)
            else:
                log.info("%s: closed task %s (no longer assigned)", self.name, task_id)
        for task_id in sorted(set(self.standby_tasks) - set(standby) - set(active)):
            with self.tasks_lock:
                reader.unregister(task_id)
                self.standby_tasks.pop(task_id).close(clean=True)
            log.info("%s: closed standby %s (no longer assigned)", self.name, task_id)

        for task_id, partitions in sorted(active.items()):
            task = self.tasks.get(task_id)
            if task is not None and task.state is not TaskState.SUSPENDED:
                continue  # unchanged: never revoked under the cooperative protocol
            self._start_active(task_id, sorted(TopicPartition(tp.topic, tp.partition) for tp in partitions))

        for task_id in sorted(standby):
            if task_id in active:
                continue
            existing = self.standby_tasks.get(task_id)
            if existing is not None:
                existing.warmup = task_id in warmups
                continue
            collector, stores = self._new_stores(task_id)
            stores.initialize()
            self._add_standby(task_id, stores, collector, warmup=task_id in warmups)

        self.next_probing_rebalance_ms = info.next_rebalance_ms if info.next_rebalance_ms >= 0 else None
        log.info("%s: active %s, standby %s (warmup %s), next rebalance %s", self.name,
                 [str(t) for t in sorted(active)], [str(t) for t in sorted(set(standby) - set(active))],
                 [str(t) for t in sorted(warmups)], self.next_probing_rebalance_ms)

    def _start_active(self, task_id: TaskId, partitions: list[TopicPartition]) -> None:
        """Run ``task_id`` here: resume it (it was suspended), promote its standby, or create
        it. Its changelog offsets are looked up before the task enters ``tasks``, so the
        status publisher never sees it restoring without its restoration progress."""
        reader = self.changelog_reader
        committed = {tp: self.consumer.committed(KafkaTopicPartition(*tp), metadata=True) for tp in partitions}
        suspended = self.tasks.get(task_id)
        standby = self.standby_tasks.get(task_id)
        if suspended is not None:
            task = suspended
            restored = reader.register(task_id, task.stores)
        elif standby is not None:
            task = self._create_task(task_id, partitions, standby.stores, standby.collector)
            task.initialize()
            restored = reader.promote(task_id)
        else:
            task = self._create_task(task_id, partitions)
            try:
                task.initialize()
                restored = reader.register(task_id, task.stores)
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
                self._restoration_completed(task_id)
        if not restored:
            self._pause(partitions)

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

    def _maybe_request_rebalance(self, now: int) -> None:
        """Probing (are the warmups caught up?) and follow-up rebalances at their time."""
        due = self.next_probing_rebalance_ms
        if due is not None and now >= due:
            self.next_probing_rebalance_ms = None
            log.info("%s: requesting a %s rebalance", self.name, "follow-up" if due == 0 else "probing")
            request_rebalance(self.consumer)

    def _pause(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            if tp not in self._paused:
                self.consumer.pause(KafkaTopicPartition(tp.topic, tp.partition))
                self._paused.add(tp)

    def _new_stores(self, task_id: TaskId) -> tuple[RecordCollector, TaskStateManager]:
        """A task's stores and the collector their changelog writes go through (a standby
        never writes, but keeps the collector for when it is promoted)."""
        collector = RecordCollector(self.producer, task_id=task_id)
        return collector, TaskStateManager(task_id, self.topology, self.config, record_collector=collector)

    def _create_task(self, task_id: TaskId, partitions: list[TopicPartition], stores: TaskStateManager | None = None,
                     collector: RecordCollector | None = None) -> StreamTask:
        if stores is None:
            collector, stores = self._new_stores(task_id)
        return StreamTask(task_id, self.topology, self.config, record_collector=collector, stores=stores,
                          partitions=partitions, wall_clock=self.wall_clock_ms)

    def _restoration_completed(self, task_id: TaskId) -> None:
        task = self.tasks[task_id]
        task.complete_restoration()
        for tp in task.partitions:
            if tp in self._paused and task.buffered_size(tp) < self.config.buffered_records_per_partition:
                self.consumer.resume(KafkaTopicPartition(tp.topic, tp.partition))
                self._paused.discard(tp)
        log.info("%s: task %s restored and running", self.name, task_id)

    # ------------------------------------------------------------------ close

    def _close(self, *, clean: bool) -> None:
        """Clean: commit and checkpoint every task, then close it and leave the group.
        Dirty (after an error): close without committing; committed state stays intact."""
        self._fail_safe_point_actions()
        if clean and self.consumer is not None:
            try:
                self.commit([t for t in self.tasks.values() if t.state is TaskState.RUNNING],
                            enforce_checkpoint=True)
            except Exception as exc:  # noqa: BLE001 - fall back to a dirty close
                log.exception("%s: final commit failed; closing tasks without committing", self.name)
                self.error = self.error or exc
                clean = False
        with self.tasks_lock:
            if self.changelog_reader is not None and clean:
                self.changelog_reader.close()
            for task in [*self.tasks.values(), *self.standby_tasks.values()]:
                try:
                    task.close(clean=clean)
                except Exception:  # noqa: BLE001 - close the other tasks too
                    log.exception("%s: error closing task %s", self.name, task.id)
            self.tasks.clear()
            self.standby_tasks.clear()
        for client, close in ((self._admin, lambda c: c.close()),
                              (self.consumer, lambda c: c.close(autocommit=False)),
                              (self.restore_consumer, lambda c: c.close(autocommit=False)),
                              (self.producer, lambda c: c.close(timeout=10))):
            if client is None:
                continue
            try:
                close(client)
            except Exception:  # noqa: BLE001 - best effort while shutting down
                log.exception("%s: error closing %s", self.name, type(client).__name__)


def _kafka_offsets(offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> dict:
    return {KafkaTopicPartition(tp.topic, tp.partition): KafkaOffsetAndMetadata(om.offset, om.metadata, -1)
            for tp, om in offsets.items()}
