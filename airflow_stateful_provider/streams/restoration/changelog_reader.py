"""Restoration and standby updating: replaying changelog partitions into stores (docs/semantics.md §2).

One :class:`ChangelogReader` per stream thread owns the thread's *restore consumer* (a
consumer without a group, ``auto_offset_reset="none"`` so that an out-of-range offset is
reported instead of silently skipped). It serves two kinds of task:

- an **active** task being restored: each changelog partition is replayed from the
  checkpointed offset + 1 (the beginning without one) up to the log end offset captured
  when its restoration started (under exactly-once too, open transactions included: see
  :meth:`ChangelogReader._high_watermarks`); records at or past that offset are never applied. When
  all of the task's partitions are done its checkpoint is written and the task is
  reported restored, so it starts processing without waiting for other tasks;
- a **standby** task: its partitions are applied continuously and never complete. A
  standby promoted to active keeps its store and restores only the remainder.

Invariants:
- records with a null key are skipped but advance the position;
- a checkpoint (at registration) or a position (an out-of-range fetch) the changelog no
  longer holds is judged by changelog_loss.py: retention on a ``compact,delete`` changelog
  wipes the store and replays it from the log start, once per detection; a changelog that
  lost records the store holds (deleted, recreated, truncated) raises ChangelogLostError
  (``on_changelog_loss="fail"``, the default; the task is reported in ``lost_tasks``, its
  directory untouched) or is wiped and replayed the same way ("restore_from_changelog");
- ``on_restore_start`` is called when the reader starts reading a partition (its next
  poll), as Kafka Streams' StoreChangelogReader does, not while the tasks of the same
  assignment are still being set up; a partition never read gets no restore callbacks;
- while active tasks restore, standby partitions are fetched only every
  ``STANDBY_TURN``-th poll: restoration comes first, standbys still move. A standby
  partition is not paused while the consumer holds the rest of a batch of it that a poll
  returned only in part (kafka-python would never fetch that partition again).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kafka import TopicPartition as KafkaTopicPartition

from airflow_stateful_provider.streams.errors import IllegalStateError
from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
from airflow_stateful_provider.streams.restoration.changelog_loss import (
    LostChangelog,
    Verdict,
    changelog_lost_error,
    judge_changelog,
)
from airflow_stateful_provider.streams.restoration.restore_source import (
    CHANGELOG,
    LOCAL,
    RestoreSource,
    choose_restore_source,
)
from airflow_stateful_provider.streams.restoration.stalls import RestorationStalls
from airflow_stateful_provider.streams.snapshots.loading import SnapshotLoader
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition

__all__ = ["ChangelogReader", "StateRestoreListener", "StandbyUpdateListener", "SuspendReason", "TaskRole"]

log = logging.getLogger(__name__)

#: While actives restore, standby partitions are fetched on one poll out of this many.
STANDBY_TURN = 4
#: Most records one poll of the restore consumer returns.
MAX_POLL_RECORDS = 10_000


class TaskRole(enum.Enum):
    ACTIVE = "active"
    STANDBY = "standby"


class SuspendReason(enum.Enum):
    """Why a standby stopped updating (Kafka Streams' StandbyUpdateListener.SuspendReason)."""

    MIGRATED = "migrated"
    PROMOTED = "promoted"


class StateRestoreListener(Protocol):
    """Active restoration progress per changelog partition (Kafka Streams' StateRestoreListener)."""

    def on_restore_start(self, partition: TopicPartition, store_name: str, start_offset: int,
                         end_offset: int) -> None: ...

    def on_batch_restored(self, partition: TopicPartition, store_name: str, batch_end_offset: int,
                          num_restored: int) -> None: ...

    def on_restore_end(self, partition: TopicPartition, store_name: str, total_restored: int) -> None: ...

    def on_restore_suspended(self, partition: TopicPartition, store_name: str, total_restored: int) -> None: ...


class StandbyUpdateListener(Protocol):
    """Standby updating per changelog partition (Kafka Streams' StandbyUpdateListener)."""

    def on_update_start(self, partition: TopicPartition, store_name: str, start_offset: int) -> None: ...

    def on_batch_loaded(self, partition: TopicPartition, store_name: str, task_id: TaskId, batch_end_offset: int,
                        batch_size: int, current_end_offset: int | None) -> None: ...

    def on_update_suspended(self, partition: TopicPartition, store_name: str, store_offset: int,
                            current_end_offset: int | None, reason: SuspendReason) -> None: ...


class _Silent:
    """Default listener: ignores every callback of both protocols."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


@dataclasses.dataclass
class ChangelogState:
    """Bookkeeping of one changelog partition of a registered task."""

    partition: TopicPartition
    task_id: TaskId
    store_name: str
    state_manager: TaskStateManager
    role: TaskRole
    #: Offset of the first record to read (checkpoint + 1, or the log start).
    start_offset: int = 0
    #: Active: log end offset captured when restoration started (it stops there).
    #: Standby: the last known log end offset (for lag), or None before the first fetch.
    end_offset: int | None = 0
    #: Next offset to read.
    position: int = 0
    restored: int = 0
    completed: bool = False
    #: Active: on_restore_start was called (at the first poll that reads the partition).
    announced: bool = False

    @property
    def active_end_offset(self) -> int:
        """Where an active restoration stops (captured when it started; only a standby's is None)."""
        if self.end_offset is None:
            raise IllegalStateError(f"changelog {self.partition} of task {self.task_id} is a standby's: it has no end")
        return self.end_offset


#: What one poll of the restore consumer returns: kafka-python's records per partition.
FetchedRecords = dict[KafkaTopicPartition, list[Any]]


class ChangelogReader:
    """Restores active tasks and updates standby tasks from one restore consumer."""

    def __init__(self, restore_consumer: Any, listener: StateRestoreListener | None = None,
                 standby_listener: StandbyUpdateListener | None = None, poll_timeout_ms: int = 100,
                 snapshot_loader: SnapshotLoader | None = None, *, on_changelog_loss: str = "fail",
                 log_end_offsets: Callable[[list[KafkaTopicPartition]], dict[KafkaTopicPartition, int]] | None = None,
                 retried: Callable[..., Any] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._consumer = restore_consumer
        #: ``retried(call, waiting_for, function, *args)`` calls ``function(*args)``, again
        #: while the brokers cannot answer it, up to the task timeout (the stream thread's
        #: KafkaWaits.retried); by default once.
        self._retried = retried or (lambda call, waiting_for, function, *args: function(*args))
        self._snapshot_loader = snapshot_loader
        #: StreamsConfig.on_changelog_loss: "fail" or "restore_from_changelog".
        self._on_changelog_loss = on_changelog_loss
        #: Exactly-once (the restore consumer's end offsets are last stable offsets): looks up
        #: the log end offsets counting open transactions, where active restorations stop
        #: (:meth:`_high_watermarks`) and against which checkpoints are judged (changelog_loss.py).
        self._log_end_offsets = log_end_offsets
        #: Reports an active restoration that stands still (stalls.py).
        self._stalls = RestorationStalls(exactly_once=log_end_offsets is not None, clock=clock)
        #: Tasks refused because their changelog lost what their stores hold (status reports them).
        self.lost_tasks: dict[TaskId, tuple[LostChangelog, ...]] = {}
        #: Per task, where its state came from at its last assignment (status reports it).
        self.restore_sources: dict[TaskId, RestoreSource] = {}
        self.listener: StateRestoreListener = listener or _Silent()
        self.standby_listener: StandbyUpdateListener = standby_listener or _Silent()
        self._poll_timeout_ms = poll_timeout_ms
        self._changelogs: dict[TopicPartition, ChangelogState] = {}
        self._tasks: dict[TaskId, list[TopicPartition]] = {}
        self._roles: dict[TaskId, TaskRole] = {}
        self._polls = 0
        self._standbys_paused = False
        #: Active partitions were registered or promoted since the last announcement.
        self._to_announce = False
        #: The partition whose fetched batch the last poll returned only in part (see
        #: _give_standbys_their_turn), or None.
        self._cut_partition: KafkaTopicPartition | None = None

    # ------------------------------------------------------------------ registration

    def _offsets(self, call: str, partitions: list[KafkaTopicPartition]) -> dict[KafkaTopicPartition, int]:
        """The restore consumer's ``end_offsets`` or ``beginning_offsets`` of ``partitions``,
        retried while the brokers cannot answer (``retried``)."""
        result: dict[KafkaTopicPartition, int] = self._retried(call, "the changelogs' partition leaders",
                                                                getattr(self._consumer, call), partitions)
        return result

    def prepare_stores(self, task_id: TaskId, state_manager: TaskStateManager) -> RestoreSource | None:
        """Before a new task's stores open: keep usable local state, else load the newest
        valid snapshot, else leave it to the changelog (restore_source.py). None (and nothing
        reported) for a task without persistent logged stores. A task directory holding another
        application's or task's state is refused first (ForeignStateError), before a snapshot
        could go into it."""
        state_manager.claim_task_dir()
        stores = state_manager.persistent_changelogs()
        if not stores:
            self.restore_sources.pop(task_id, None)
            return None
        bounds = None  # without snapshots, register() checks the checkpoint against the changelog
        if self._snapshot_loader is not None:
            # exactly-once too, local state or a snapshot up to the log end is usable
            ends = self._restore_ends(stores.values())
            begins = _by_partition(self._offsets("beginning_offsets", _kafka(stores.values())))
            bounds = {tp: (begins[tp], ends[tp]) for tp in stores.values()}
        source = choose_restore_source(task_id, state_manager.task_dir, stores, bounds, self._snapshot_loader)
        self.restore_sources[task_id] = source
        return source

    def keeps_local_state(self, task_id: TaskId) -> None:
        """A task comes back with its stores still open (resumed): its state is local."""
        if task_id in self.restore_sources:
            self.restore_sources[task_id] = RestoreSource(LOCAL)

    def register(self, task_id: TaskId, state_manager: TaskStateManager) -> bool:
        """Start restoring an active task's logged stores. Returns True when there is
        nothing to restore (the task may run at once); otherwise it completes in :meth:`restore`."""
        states = self._initial_states(task_id, state_manager, TaskRole.ACTIVE)
        if not states:
            return True
        pending = False
        for state in states:
            if state.position >= state.active_end_offset:
                state.completed = True
            else:
                pending = True
        if not pending:
            self._finish_task(task_id)
            return True
        self._to_announce = True
        self._reassign()
        return False

    def register_standby(self, task_id: TaskId, state_manager: TaskStateManager) -> None:
        """Start updating a standby task's stores; they follow their changelogs until the
        task is unregistered or promoted."""
        states = self._initial_states(task_id, state_manager, TaskRole.STANDBY)
        for state in states:
            state.end_offset = None
            self.standby_listener.on_update_start(state.partition, state.store_name, state.position)
        if states:
            self._reassign()

    def promote(self, task_id: TaskId) -> bool:
        """A standby becomes active: it keeps its store and restores only up to the
        current end offset. Returns True when it is already caught up."""
        if self._roles.get(task_id) is not TaskRole.STANDBY:
            raise ValueError(f"task {task_id} is not a standby of this reader")
        partitions = self._tasks[task_id]
        ends = self._restore_ends(partitions)
        self._roles[task_id] = TaskRole.ACTIVE
        self.restore_sources[task_id] = RestoreSource(LOCAL)  # the standby's stores
        pending = False
        for tp in partitions:
            state = self._changelogs[tp]
            self.standby_listener.on_update_suspended(tp, state.store_name, state.position, ends[tp],
                                                      SuspendReason.PROMOTED)
            state.role, state.end_offset = TaskRole.ACTIVE, ends[tp]
            state.start_offset, state.restored = state.position, 0
            if state.position >= state.end_offset:
                state.completed = True
            else:
                pending = True
        if not pending:
            self._finish_task(task_id)
            return True
        self._to_announce = True
        # Standby partitions may be paused (active restoration has priority); this one now
        # restores an active and must be fetched at once.
        self._consumer.resume(*_kafka(partitions))
        return False

    def unregister(self, task_id: TaskId) -> None:
        """Stop serving a task (revoked or migrated): suspended callbacks and a checkpoint
        of what was applied so far."""
        partitions = self._tasks.pop(task_id, [])
        role = self._roles.pop(task_id, None)
        manager = None
        for tp in partitions:
            state = self._changelogs.pop(tp)
            manager = state.state_manager
            if role is TaskRole.STANDBY:
                self.standby_listener.on_update_suspended(tp, state.store_name, state.position, state.end_offset,
                                                          SuspendReason.MIGRATED)
            elif state.announced and not state.completed:
                self.listener.on_restore_suspended(tp, state.store_name, state.restored)
        if manager is not None:
            manager.checkpoint({}, force=True)
        if partitions:
            self._reassign()

    def _initial_states(self, task_id: TaskId, state_manager: TaskStateManager, role: TaskRole) -> list[ChangelogState]:
        """Where each changelog partition of the task starts, after judging its checkpoint
        against the changelog's current offsets (changelog_loss.py)."""
        if task_id in self._tasks:
            raise ValueError(f"task {task_id} is already registered with this reader")
        partitions = {name: TopicPartition(*tp) for name, tp in state_manager.changelog_partitions().items()}
        if not partitions:
            return []
        checkpointed = state_manager.checkpointed_offsets()
        if role is TaskRole.ACTIVE:
            ends, high_watermarks = self._restore_ends(partitions.values()), {}
        else:  # a standby has no end: the log end is asked only to judge a checkpoint past the last stable offset
            ends = _by_partition(self._offsets("end_offsets", _kafka(partitions.values())))
            high_watermarks = self._high_watermarks([tp for tp in partitions.values()
                                                     if tp in checkpointed and checkpointed[tp] + 1 > ends[tp]])
        begins = _by_partition(self._offsets("beginning_offsets", _kafka(partitions.values())))
        verdicts: dict[str, Verdict] = {}
        lost: list[LostChangelog] = []
        for store_name, tp in partitions.items():
            checkpoint = checkpointed.get(tp)
            if checkpoint is None:
                continue  # nothing claimed: restore from the log start
            verdicts[store_name] = judge_changelog(
                checkpoint + 1, begins[tp], ends[tp], high_watermark=high_watermarks.get(tp),
                deletes_by_time=state_manager.changelog_deletes_by_time(store_name))
            if verdicts[store_name] is Verdict.LOST:
                lost.append(LostChangelog(str(task_id), role.value, store_name, tp[0], tp[1], checkpoint,
                                          begins[tp], ends[tp], state_manager.task_dir))
        if lost and self._on_changelog_loss == "fail":
            self.lost_tasks[task_id] = tuple(lost)
            raise changelog_lost_error(lost)  # before any store is touched
        for loss in lost:
            log.warning("%s; on_changelog_loss='restore_from_changelog': wiping the store and rebuilding it from "
                        "what the changelog holds now", loss.describe())
        states = []
        for store_name, tp in partitions.items():
            verdict = verdicts.get(store_name)
            if verdict is Verdict.REPLAY:
                log.warning("task %s: checkpointed offset %d of %s is below the log start %d (retention of its "
                            "compact,delete changelog); wiping store %s and replaying it from the log start",
                            task_id, checkpointed[tp], tp, begins[tp], store_name)
            if verdict in (Verdict.REPLAY, Verdict.LOST):
                state_manager.wipe_store(store_name)
                self._note_wiped(task_id)
            start = checkpointed[tp] + 1 if verdict is Verdict.RESTORE else begins[tp]
            state = ChangelogState(tp, task_id, store_name, state_manager, role, start, ends[tp], start)
            self._changelogs[tp] = state
            states.append(state)
        self._tasks[task_id] = list(partitions.values())
        self._roles[task_id] = role
        return states

    def _restore_ends(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Where an active restoration of ``partitions`` ends: their log end offsets, open
        transactions included (:meth:`_high_watermarks` under exactly-once)."""
        partitions = list(partitions)
        return self._high_watermarks(partitions) or _by_partition(self._offsets("end_offsets", _kafka(partitions)))

    def _high_watermarks(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Exactly-once: the log end offsets (open transactions included) of ``partitions``; {}
        otherwise. Restorations stop there, not at the restore consumer's last stable offset: a
        commit returns before its markers reach every partition, so the previous owner's last
        transaction can have stable input offsets while its changelog records are not readable
        yet; the consumer waits for them (docs/semantics.md §2; Kafka Streams' KAFKA-10167)."""
        partitions = list(partitions)
        if not partitions or self._log_end_offsets is None:
            return {}
        return _by_partition(self._retried("list_partition_offsets", "the changelogs' partition leaders",
                                                  self._log_end_offsets, _kafka(partitions)))

    # ------------------------------------------------------------------ queries

    @property
    def restoring_tasks(self) -> set[TaskId]:
        """Active tasks still restoring."""
        return {t for t, role in self._roles.items() if role is TaskRole.ACTIVE}

    @property
    def standby_tasks(self) -> set[TaskId]:
        return {t for t, role in self._roles.items() if role is TaskRole.STANDBY}

    def progress(self) -> list[ChangelogState]:
        """Bookkeeping of every registered changelog partition (for status reporting)."""
        return list(self._changelogs.values())

    # ------------------------------------------------------------------ restoring

    def restore(self, poll_timeout_ms: int | None = None) -> list[TaskId]:
        """Poll once and apply what arrived (:meth:`poll` then :meth:`apply`); returns the
        active tasks whose restoration completed."""
        return self.apply(self.poll(poll_timeout_ms))

    def poll(self, poll_timeout_ms: int | None = None) -> FetchedRecords:
        """Fetch the next changelog records (the network half of :meth:`restore`: no store is
        written and no task completes here)."""
        from kafka.errors import OffsetOutOfRangeError

        if not self._tasks:
            return {}
        self._announce_restorations()
        self._give_standbys_their_turn()
        timeout = self._poll_timeout_ms if poll_timeout_ms is None else poll_timeout_ms
        self._cut_partition = None
        try:
            # handed on without a local variable: see StreamThread.run_once (kafka-python's
            # timed-out polls keep the calling frames' variables alive)
            return self._note_cut(self._consumer.poll(timeout_ms=timeout, max_records=MAX_POLL_RECORDS))
        except OffsetOutOfRangeError as exc:
            self._handle_out_of_range(exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {})
            return {}

    def _note_cut(self, fetched: FetchedRecords) -> FetchedRecords:
        if sum(len(records) for records in fetched.values()) >= MAX_POLL_RECORDS:
            # The consumer returns fetched batches one after the other; a full poll stopped in
            # the middle of the last one, whose rest stays buffered for the next poll.
            self._cut_partition = next(reversed(fetched))
        return fetched

    def apply(self, fetched: FetchedRecords) -> list[TaskId]:
        """Apply records :meth:`poll` fetched (local work only); returns the active tasks whose
        restoration completed, their checkpoints written."""
        for kafka_tp, records in fetched.items():
            state = self._changelogs.get(TopicPartition(kafka_tp.topic, kafka_tp.partition))
            if state is None or state.completed or not records:
                continue
            if state.role is TaskRole.ACTIVE:
                self._apply_active(state, records)
            else:
                self._apply_standby(state, records, kafka_tp)
        completed: list[TaskId] = []
        restoring = sorted(self.restoring_tasks)
        for task_id in restoring:
            partitions = self._tasks[task_id]
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
        if restoring:
            self._report_stalls()
        return completed

    def _report_stalls(self) -> None:
        self._stalls.check({state.partition: (state.task_id, state.position, state.active_end_offset)
                            for state in self._changelogs.values()
                            if state.role is TaskRole.ACTIVE and not state.completed})

    def _announce_restorations(self) -> None:
        """on_restore_start for the active partitions this poll starts reading."""
        if not self._to_announce:
            return
        self._to_announce = False
        for state in self._changelogs.values():
            if state.role is TaskRole.ACTIVE and not state.completed and not state.announced:
                state.announced = True
                self.listener.on_restore_start(state.partition, state.store_name, state.position,
                                               state.active_end_offset)

    def _give_standbys_their_turn(self) -> None:
        self._polls += 1
        pause = bool(self.restoring_tasks) and self._polls % STANDBY_TURN != 0
        if pause and not self._standbys_paused and self._standby_batch_cut():
            # Never pause a partition with the rest of a batch buffered in the consumer:
            # kafka-python (3.0.12) parks that rest when the partition is paused and, once it
            # is resumed, hands it back only if its in-line slot is None, but a used-up batch
            # stays in that slot; the parked partition is then never fetched again and the
            # standby stalls for good. Keep standbys fetching until the batch is used up.
            pause = False
        if pause == self._standbys_paused:
            return
        standby = _kafka(tp for tp, s in self._changelogs.items() if s.role is TaskRole.STANDBY)
        if standby:
            (self._consumer.pause if pause else self._consumer.resume)(*standby)
        self._standbys_paused = pause

    def _standby_batch_cut(self) -> bool:
        tp = self._cut_partition
        state = None if tp is None else self._changelogs.get(TopicPartition(tp.topic, tp.partition))
        return state is not None and state.role is TaskRole.STANDBY

    def _apply(self, state: ChangelogState, records: list[Any]) -> int:
        """Write ``records`` into the task's stores; count them for its restore source (a
        standby counts every record it applied since it got the task)."""
        applied = state.state_manager.restore(state.partition, records)
        state.position = records[-1].offset + 1
        state.restored += applied
        source = self.restore_sources.get(state.task_id)
        if source is not None:
            source.changelog_records += applied
        return applied

    def _apply_active(self, state: ChangelogState, records: list[Any]) -> None:
        end = state.end_offset
        if records[-1].offset >= end:
            records = [r for r in records if r.offset < end]
            if not records:
                return
        applied = self._apply(state, records)
        self.listener.on_batch_restored(state.partition, state.store_name, records[-1].offset, applied)

    def _apply_standby(self, state: ChangelogState, records: list[Any], kafka_tp: KafkaTopicPartition) -> None:
        applied = self._apply(state, records)
        last = records[-1].offset
        highwater = self._consumer.highwater(kafka_tp)
        if highwater is not None:
            state.end_offset = highwater
        self.standby_listener.on_batch_loaded(state.partition, state.store_name, state.task_id, last, applied,
                                              state.end_offset)

    def _reached_end(self, state: ChangelogState) -> bool:
        end = state.active_end_offset
        if state.position >= end:
            return True
        # Transaction markers and compacted gaps have offsets but no records: ask the consumer.
        position = self._consumer.position(KafkaTopicPartition(*state.partition))
        if position is not None and position >= end:
            state.position = position
            return True
        return False

    def _handle_out_of_range(self, offsets: dict[KafkaTopicPartition, int]) -> None:
        """The consumer's position of some partitions is outside their changelog now: judge
        each like a checkpoint (changelog_loss.py): replay it, or fail when records the store
        holds are gone."""
        partitions = [TopicPartition(tp.topic, tp.partition) for tp in offsets] or \
            [tp for tp, s in self._changelogs.items() if not s.completed]
        begins = _by_partition(self._offsets("beginning_offsets", _kafka(partitions)))
        ends = self._restore_ends(partitions)  # a fetch is out of range past the log end, open transactions included
        lost: dict[TaskId, list[LostChangelog]] = {}
        for tp in partitions:
            state = self._changelogs.get(tp)
            if state is None:
                continue
            verdict = judge_changelog(state.position, begins[tp], ends[tp],
                                      deletes_by_time=state.state_manager.changelog_deletes_by_time(state.store_name))
            if verdict is Verdict.RESTORE:  # moved back into range meanwhile: read on
                self._consumer.seek(KafkaTopicPartition(*tp), state.position)
                continue
            if verdict is Verdict.LOST and self._on_changelog_loss == "fail":
                lost.setdefault(state.task_id, []).append(LostChangelog(
                    str(state.task_id), state.role.value, state.store_name, tp[0], tp[1], state.position - 1,
                    begins[tp], ends[tp], state.state_manager.task_dir))
                continue
            log.warning("task %s: changelog %s offset %d is out of range [%d, %d); wiping store %s and replaying it "
                        "from the log start", state.task_id, tp, state.position, begins[tp], ends[tp],
                        state.store_name)
            state.state_manager.wipe_store(state.store_name)
            self._note_wiped(state.task_id)
            state.start_offset = state.position = begins[tp]
            if state.role is TaskRole.ACTIVE:
                state.end_offset = ends[tp]
            state.restored = 0
            self._consumer.seek(KafkaTopicPartition(*tp), state.position)
        if lost:
            self.lost_tasks.update((task_id, tuple(entries)) for task_id, entries in lost.items())
            raise changelog_lost_error([entry for entries in lost.values() for entry in entries])

    def _note_wiped(self, task_id: TaskId) -> None:
        """A store of the task was wiped: its state now comes from the changelog alone."""
        if task_id in self.restore_sources:
            self.restore_sources[task_id] = RestoreSource(CHANGELOG)

    def _finish_task(self, task_id: TaskId) -> None:
        partitions = self._tasks.pop(task_id, [])
        self._roles.pop(task_id, None)
        manager = None
        for tp in partitions:
            manager = self._changelogs.pop(tp).state_manager
        if manager is not None:
            manager.checkpoint({}, force=True)

    def _reassign(self) -> None:
        """Point the restore consumer at exactly the partitions still being read, at their
        tracked positions."""
        kafka_tps = _kafka(tp for tp, s in self._changelogs.items() if not s.completed)
        self._consumer.assign(kafka_tps)
        for tp in kafka_tps:
            self._consumer.seek(tp, self._changelogs[TopicPartition(tp.topic, tp.partition)].position)
        if kafka_tps:
            self._consumer.resume(*kafka_tps)  # assign() keeps the pause flag of partitions it keeps
        self._standbys_paused = False

    def close(self) -> None:
        for task_id in list(self._tasks):
            self.unregister(task_id)


def _kafka(partitions: Iterable[Any]) -> list[KafkaTopicPartition]:
    """kafka-python's consumer accepts only its own TopicPartition type."""
    return [KafkaTopicPartition(tp[0], tp[1]) for tp in partitions]


def _by_partition(offsets: dict[KafkaTopicPartition, int]) -> dict[TopicPartition, int]:
    return {TopicPartition(tp.topic, tp.partition): offset for tp, offset in offsets.items()}
