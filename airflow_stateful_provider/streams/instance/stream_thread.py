"""StreamThread: one consumer-group member running its assigned tasks.

Each iteration of the loop: poll the consumer (rebalances happen inside the poll), hand
the records to their tasks, restore the stores of tasks that are not yet restored (each
task starts processing as soon as its *own* stores are restored), process buffered
records in timestamp order, fire punctuations, and commit when the commit interval has
passed or a processor asked for it.

Commits (offsets, or one transaction under exactly-once) are the task committer's
(``task_committer.py``); on revocation a commit happens before the partitions are given up.

kafka-python 3 runs rebalance callbacks on the consumer's IO thread while this thread
is blocked inside ``poll()``; blocking consumer calls are refused there. Revocation
(which must commit before the rebalance proceeds) therefore uses an async listener that
awaits the offset commit. The group's assignor (``StreamsPartitionAssignor``, cooperative
protocol: tasks that stay are never revoked) hands each member its active, standby and
warmup tasks and the time of the next probing rebalance; the assignor only records them,
and this thread applies them once ``poll()`` returns, through its task manager
(``task_manager.py``: closes what left, promotes standbys that became active keeping their
stores, creates the rest), and requests the probing rebalance when it is due.

The status publisher reads this thread's tasks from another thread. Every change to which
tasks the thread holds, to a task's state, or to the changelog reader's registrations
happens under ``tasks_lock``, and the publisher copies them under it, so a status document
never shows a task half-way: a task is visible as restoring only once its changelog
offsets are known, and only until it runs. The lock covers local work only; offset
look-ups and polls happen outside it, so a slow broker never holds up status publication.
Control commands run between iterations (``safe_points.py``).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, cast

from kafka import AsyncConsumerRebalanceListener
from kafka.errors import KafkaError

from airflow_stateful_provider.streams.assignment.assignment_info import AssignmentInfo, AssignorError
from airflow_stateful_provider.streams.assignment.streams_partition_assignor import (
    REBALANCE_POLL_MS,
    AssignorContext,
    StreamsPartitionAssignor,
)
from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import (
    IllegalStateError,
    MissingTopicError,
    StreamsError,
    TaskTimeoutError,
    TransactionFailedError,
)
from airflow_stateful_provider.streams.instance.refusals import thread_refusal
from airflow_stateful_provider.streams.instance.safe_points import SafePointActions
from airflow_stateful_provider.streams.instance.snapshotting import snapshot_clients
from airflow_stateful_provider.streams.instance.task_committer import TaskCommitter, kafka_offsets
from airflow_stateful_provider.streams.instance.task_manager import TaskManager
from airflow_stateful_provider.streams.instance.thread_admin import ThreadAdmin
from airflow_stateful_provider.streams.instance.topic_watch import TopicWatch
from airflow_stateful_provider.streams.kafka.authorization import refusal_in
from airflow_stateful_provider.streams.kafka.batch_decoding import decode_batches_at_once
from airflow_stateful_provider.streams.kafka.group_join import (
    group_coordinator_unknown,
    group_rejoining,
    keep_completed_join_results,
    request_rebalance,
)
from airflow_stateful_provider.streams.kafka.parked_fetches import release_parked_fetches
from airflow_stateful_provider.streams.processing.kafka_waits import KafkaWaits
from airflow_stateful_provider.streams.processing.metrics import ThreadMetrics
from airflow_stateful_provider.streams.processing.streams_producer import StreamsProducer, transactional_id
from airflow_stateful_provider.streams.processing.task import StreamTask, TaskState
from airflow_stateful_provider.streams.restoration.changelog_reader import (
    ChangelogReader,
    StandbyUpdateListener,
    StateRestoreListener,
)
from airflow_stateful_provider.streams.restoration.restore_consumer import restore_consumer_settings
from airflow_stateful_provider.streams.restoration.standby_task import StandbyTask
from airflow_stateful_provider.streams.snapshots.taking import SnapshotTaker
from airflow_stateful_provider.streams.state.common.rocksdb_memory import RocksDBMemory
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["StreamThread", "StreamThreadState"]

log = logging.getLogger(__name__)

#: Bound of the group leader's changelog end-offset lookup (see _assignor_context).
LEADER_END_OFFSETS_TIMEOUT_MS = 5_000
#: Longest one iteration of the loop processes before it looks at commits and polls.
PROCESSING_BUDGET_MAX_MS = 1_000
#: Longest poll while there is nothing to process or restore.
IDLE_POLL_MS = 100
#: Poll timeout of the main consumer while its group rejoins and tasks restore (the
#: restore consumer's poll between two of them waits too, so the join still gets its time).
RESTORING_REBALANCE_POLL_MS = 20
#: Slices of a poll while the group rejoins (REBALANCE_POLL_MS in all): the thread goes on
#: within one slice of the assignment's arrival.
REJOIN_POLL_SLICE_MS = 20
#: While every active task restores (none runs) and the group is stable, the main consumer
#: is polled at most this often: it has no records to give, and each poll costs the
#: restoration about a millisecond of hand-offs to the consumer's IO thread.
RESTORING_MAIN_POLL_MS = 50


class StreamThreadState(enum.Enum):
    CREATED = "CREATED"
    STARTING = "STARTING"
    PARTITIONS_REVOKED = "PARTITIONS_REVOKED"
    PARTITIONS_ASSIGNED = "PARTITIONS_ASSIGNED"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    DEAD = "DEAD"


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
        instance_id: str | None = None,
        consumer_factory: Callable[..., Any],
        producer_factory: Callable[..., Any],
        admin_factory: Callable[[], Any] | None = None,
        process_id: uuid.UUID | None = None,
        restore_listener: StateRestoreListener | None = None,
        standby_listener: StandbyUpdateListener | None = None,
        on_state_change: Callable[[StreamThread, StreamThreadState, StreamThreadState], None] | None = None,
        on_error: Callable[[StreamThread, BaseException], None] | None = None,
        wall_clock: Callable[[], int] = wall_clock_ms,
        topic_roles: Mapping[str, str] | None = None,
        rocksdb_memory: RocksDBMemory | None = None,
    ) -> None:
        super().__init__(name=f"{client_id}-StreamThread-{index}", daemon=True)
        self.index = index
        self.topology = topology
        self.config = config
        #: The instance's RocksDB memory budget, shared by the stores of all its threads.
        self.rocksdb_memory = rocksdb_memory
        self.client_id = client_id
        #: Exactly-once: part of the thread's transactional id, stable across restarts.
        self.instance_id = instance_id or client_id
        self._consumer_factory = consumer_factory
        self._producer_factory = producer_factory
        #: The admin client the committer, the topic watch and exactly-once restorations share.
        self.admin = ThreadAdmin(admin_factory, self.name)
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
        #: The tasks this thread holds (``tasks``, ``standby_tasks`` and ``tasks_lock`` below).
        self.task_manager = TaskManager(self, topology, config, wall_clock)
        #: Wall-clock ms at which to trigger the next rebalance (probing or follow-up), or None.
        self.next_probing_rebalance_ms: int | None = None
        repartition_topics = {topology.decorate_topic(raw, config.application_id)
                              for raw, kind in topology.internal_topics.items() if kind == "repartition"}
        #: Thread-level metrics (processed records, commit latency, poll sizes, aborts).
        self.metrics = ThreadMetrics()
        #: The Kafka call the thread waits in now, and the task timeout of its retries.
        self.kafka_waits = KafkaWaits(cast(int, config.task_timeout_ms), interrupted=self._shutdown_requested)
        #: Commits the tasks, and purges the repartition records they committed.
        self.committer = TaskCommitter(self, config, repartition_topics, self.admin, self.metrics)
        self._pending_assignment: AssignmentInfo | None = None
        self.consumer: Any = None
        self.restore_consumer: Any = None
        self.producer: StreamsProducer | None = None
        #: How long one iteration processes before it commits (when due) and polls again:
        #: the commit interval, at most PROCESSING_BUDGET_MAX_MS.
        self._processing_budget_ms = max(1, min(cast(int, config.commit_interval_ms), PROCESSING_BUDGET_MAX_MS))
        self.changelog_reader: ChangelogReader | None = None
        self.snapshot_taker: SnapshotTaker | None = None
        self.error: BaseException | None = None
        #: time.monotonic() of the first poll that returned records, and of the last commit
        #: (benchmarks measure processing throughput between the two).
        self.first_records_polled_at: float | None = None
        self._main_polled_at = 0.0  # monotonic time of the last main consumer poll
        #: Actions (control commands) waiting for the next safe point; see run_at_safe_point.
        self._safe_points = SafePointActions(self.name)
        #: Set when the thread closes after an error: from then on nothing commits (_close).
        self._closing_dirty = False
        #: Tells a deleted topic from other failures (topic_watch.py); ``topic_roles`` names
        #: every topic the application reads and writes.
        self.topic_watch = TopicWatch(topic_roles or {}, self.admin, self.name)
        #: Set by a rollback: the next iteration checks that every topic still exists.
        self._check_topics = False

    @property
    def tasks(self) -> dict[TaskId, StreamTask]:
        """Active tasks by id (the status publisher copies them under ``tasks_lock``)."""
        return self.task_manager.tasks

    @property
    def standby_tasks(self) -> dict[TaskId, StandbyTask]:
        return self.task_manager.standby_tasks

    @property
    def tasks_lock(self) -> threading.RLock:
        """Held for every change to the tasks, their states and the reader's registrations."""
        return self.task_manager.tasks_lock

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
        return self._safe_points.submit(action)

    def _run_safe_point_actions(self) -> None:
        if self.committer.blocked or group_rejoining(self.consumer):
            return  # mid-rebalance: the next iteration after it
        self._safe_points.run(self)

    # ------------------------------------------------------------------ run

    def run(self) -> None:
        clean = False
        try:
            self._set_state(StreamThreadState.STARTING)
            self._create_clients()
            self._run_loop()
            clean = True
        except BaseException as exc:  # reported to the instance, which decides
            self.error = self._explain(exc)
            log.error("%s failed", self.name, exc_info=self.error)
        finally:
            self._set_state(StreamThreadState.PENDING_SHUTDOWN)
            self._close(clean=clean)
            self._set_state(StreamThreadState.DEAD)
            if self.error is not None and self._on_error is not None:
                self._on_error(self, self.error)

    def _explain(self, exc: BaseException) -> BaseException:
        """The error the thread dies with: the missing ACL when the brokers refused it, a
        missing topic when one is behind ``exc``. Not asked after a task timeout: the brokers
        did not answer, and would not answer that."""
        if refusal_in(exc) is not None:
            return thread_refusal(exc, self.config.application_id,
                                  transactional_id(self.config.application_id, self.instance_id, self.index), self.name)
        if isinstance(exc, (StreamsError, KafkaError)) and not isinstance(exc, (MissingTopicError, TaskTimeoutError)):
            try:
                topic: str | None = getattr(exc, "topic", None)
                self.topic_watch.check(exc, extra=[topic] if topic else ())
            except MissingTopicError as missing:
                return missing
        return exc

    def _create_clients(self) -> None:
        prefix = f"{self.client_id}-StreamThread-{self.index}"
        eos = self.config.exactly_once
        self.producer = StreamsProducer(
            self._producer_factory, client_id=f"{prefix}-producer",
            transactional_id=transactional_id(self.config.application_id, self.instance_id, self.index)
            if eos else None, on_slow_flush=self.topic_watch.check, waits=self.kafka_waits)
        # Exactly-once: input, repartition topics, restoration and standbys see committed
        # records only; restoration still ends at the log end (changelog_reader.py).
        isolation = {"isolation_level": "read_committed"} if eos else {}
        self.restore_consumer = self._consumer_factory(client_id=f"{prefix}-restore-consumer",
                                                       **restore_consumer_settings(self.config.consumer_configs, eos))
        static = {} if self.config.group_instance_id is None else \
            {"group_instance_id": f"{self.config.group_instance_id}-{self.index}"}
        self.consumer = self._consumer_factory(
            client_id=f"{prefix}-consumer", group_id=self.config.application_id, auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=[StreamsPartitionAssignor(self._assignor_context())],
            **static, **isolation)
        # kafka-python 3.0.12 loses joins that finish after the poll that started them
        # returned, and can leave a leader's join unfinished (group_join.py).
        keep_completed_join_results(self.consumer)
        for consumer in (self.consumer, self.restore_consumer):
            decode_batches_at_once(consumer)  # same records, about half the CPU (batch_decoding.py)
        self.snapshot_taker, loader = snapshot_clients(self.config)
        self.changelog_reader = ChangelogReader(
            self.restore_consumer, self._restore_listener, self._standby_listener, snapshot_loader=loader,
            on_changelog_loss=self.config.on_changelog_loss,
            log_end_offsets=self.admin.log_end_offsets if eos and self.admin.available else None,
            retried=self.kafka_waits.retried)
        topics = sorted(self.task_manager.topic_to_subtopology)
        self.consumer.subscribe(topics, listener=_RebalanceListener(self))
        # Load the topics' metadata before the first poll joins the group, and after
        # subscribing: kafka-python takes the subscribed topics' partitions (the snapshot a
        # leader's assignment is checked against) from metadata updates that arrive after
        # subscribe(). Joined without them, a member is assigned nothing, or a leader finds
        # its assignment outdated at once and a second rebalance follows.
        self.consumer.topics()

    def _run_loop(self) -> None:
        self.committer.last_commit_ms = self.wall_clock_ms()
        while not self._shutdown_requested.is_set():
            self.run_once()

    def started_changelog_reader(self) -> ChangelogReader:
        """The changelog reader, created with the thread's clients before its loop runs."""
        if self.changelog_reader is None:
            raise IllegalStateError(f"{self.name}: the changelog reader is created when the thread starts")
        return self.changelog_reader

    def run_once(self) -> None:
        """One iteration of the loop (see module docstring)."""
        if self._check_topics:
            self._check_topics = False
            self.topic_watch.check()  # a failed transaction may be a deleted topic: stop, do not loop
        reader = self.started_changelog_reader()
        restoring = bool(reader.restoring_tasks)  # as of before this poll's assignment
        busy = restoring or self.task_manager.has_processable()
        # An idle thread with standbys splits its wait between the two consumers.
        idle_wait = IDLE_POLL_MS // 2 if reader.standby_tasks else IDLE_POLL_MS
        # While the group rebalances, give the join its round trip (see REBALANCE_POLL_MS);
        # restoring, in shorter polls: the join runs on the consumer's IO thread meanwhile,
        # and a 200 ms poll would stall restoration as long.
        rejoining = group_rejoining(self.consumer)
        if rejoining:
            timeout = RESTORING_REBALANCE_POLL_MS if restoring else REBALANCE_POLL_MS
        else:
            timeout = 0 if busy else idle_wait
        # No local variable of this method holds polled records: kafka-python 3.0.12 turns a
        # poll that times out into a reference cycle (the raised exception, its traceback and
        # the frames that called poll, this one included) that keeps those frames' variables
        # until the collector's next older-generation pass: whole batches of records, and a
        # 100 ms pause to collect them. The batches are handed on inside the call instead.
        if self._main_poll_due(timeout, restoring):
            release_parked_fetches(self.consumer)  # a resumed partition gets its parked records back
            self._poll_main(timeout, rejoining=rejoining)
            self._main_polled_at = time.monotonic()
            # every broker down: poll waits out the missing group coordinator; say so
            self.kafka_waits.still_waiting("poll", "the group coordinator (no broker answers)"
                                           if group_coordinator_unknown(self.consumer) else None)
        else:
            self._take_polled({})
        if reader.restoring_tasks or reader.standby_tasks:
            wait = 0 if self.task_manager.has_processable() else (50 if reader.restoring_tasks else idle_wait)
            self._apply_changelogs(reader.poll(poll_timeout_ms=wait))
        try:
            self.metrics.record_processed(self.task_manager.process(self._processing_budget_ms))
            for task in self.task_manager.running_tasks():
                task.maybe_punctuate_system_time()
        except TransactionFailedError as exc:
            self.roll_back(exc)
        now = self.wall_clock_ms()
        self.committer.maybe_commit(now)
        self.committer.maybe_purge_repartition_topics(now)
        self._maybe_request_rebalance(now)
        self.task_manager.resume_drained_partitions()
        if self._safe_points:
            self._run_safe_point_actions()
        if self.state is StreamThreadState.PARTITIONS_ASSIGNED and not reader.restoring_tasks:
            self._set_state(StreamThreadState.RUNNING)

    def _main_poll_due(self, timeout: int, restoring: bool) -> bool:
        """Whether this iteration polls the main consumer: always, except while only
        restoration runs in a stable group, where once per RESTORING_MAIN_POLL_MS is enough
        (heartbeats have their own thread; a rebalance is noticed through group_rejoining)."""
        if timeout or not restoring or self.task_manager.running_tasks():
            return True
        return time.monotonic() - self._main_polled_at >= RESTORING_MAIN_POLL_MS / 1000

    # ------------------------------------------------------------------ input

    def _poll_main(self, timeout_ms: int, *, rejoining: bool) -> None:
        """Poll the main consumer for up to ``timeout_ms``. While the group rejoins, in slices
        of REJOIN_POLL_SLICE_MS that stop once the assignment (or a record) came: one
        kafka-python poll would wait out its whole timeout on a fetch at the end of the
        input after the join completed, and the new tasks would start that much later."""
        if not rejoining:
            self._take_polled(self.consumer.poll(timeout_ms=timeout_ms,
                                                 max_records=self.config.buffered_records_per_partition))
            return
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            remaining_ms = max(0, round((deadline - time.monotonic()) * 1000))
            if self._take_polled(self.consumer.poll(timeout_ms=min(REJOIN_POLL_SLICE_MS, remaining_ms),
                                                    max_records=self.config.buffered_records_per_partition)) \
                    or remaining_ms <= REJOIN_POLL_SLICE_MS:  # that was the last slice
                return

    def _take_polled(self, fetched: dict) -> bool:
        """After a main consumer poll: apply the assignment it brought, then hand its records
        to their tasks. Whether there was either."""
        info, self._pending_assignment = self._pending_assignment, None
        if info is not None:
            self._apply_assignment(info)
        if self.task_manager.tasks_to_revive:
            self.task_manager.revive_tasks()
        if fetched and self.first_records_polled_at is None:
            self.first_records_polled_at = time.monotonic()
        self.metrics.record_poll(sum(len(records) for records in fetched.values()))
        for kafka_tp, records in fetched.items():
            self.task_manager.add_records(TopicPartition(kafka_tp.topic, kafka_tp.partition), records)
        return info is not None or bool(fetched)

    def _apply_changelogs(self, fetched: dict) -> None:
        """Write what the restore consumer fetched into the stores; restored tasks start."""
        with self.tasks_lock:
            for task_id in self.started_changelog_reader().apply(fetched):
                self.task_manager.restoration_completed(task_id)

    # ------------------------------------------------------------------ commit

    def commit(self, tasks: Iterable[StreamTask] | None = None, *, enforce_checkpoint: bool = False) -> int | None:
        """Commit the running tasks that processed since their last commit (task_committer.py).
        None when the group refused the commit (rebalancing) or the transaction failed."""
        return self.committer.commit(tasks, enforce_checkpoint=enforce_checkpoint)

    @property
    def last_committed_at(self) -> float | None:
        """time.monotonic() of the last successful commit."""
        return self.committer.last_committed_at

    def roll_back(self, cause: BaseException) -> None:
        """Exactly-once: the transaction is aborted, so what the running tasks did since the
        last commit never happened. Close them without committing (their stores drop the
        buffered writes and stay at the last commit) and run them again from the committed
        offsets: the loop revives them before its next processing step. A refusal of the
        brokers (a missing ACL) is no transient failure: the thread dies with it."""
        if refusal_in(cause) is not None:
            raise cause
        log.warning("%s: transaction failed, rolling %d running task(s) back to the last commit: %s",
                    self.name, len(self.task_manager.running_tasks()), cause)
        assert self.producer is not None
        self.producer.abort_transaction()
        self.metrics.record_transaction_abort()
        self.task_manager.close_running_for_revival()
        self._check_topics = True

    # ------------------------------------------------------------------ rebalance

    def _prepare_revocation(self, revoked: Iterable[Any]) -> dict:
        """Listener, IO thread, this thread blocked in poll: flush the revoked tasks and
        return the offsets to commit before the partitions are given up. Nothing while the
        thread closes after an error: what it did since the last commit must not count."""
        if self._closing_dirty:
            return {}
        if self.state is not StreamThreadState.PENDING_SHUTDOWN:
            self._set_state(StreamThreadState.PARTITIONS_REVOKED)
        offsets = self.task_manager.prepare_revocation(revoked)
        if self.config.exactly_once:
            # The revoked tasks' output shares one transaction with every other task: commit
            # them all now (a blocking call on the producer's own network thread).
            self.commit()
            return {}
        return kafka_offsets(offsets)

    def _complete_revocation(self, revoked: Iterable[Any]) -> None:
        self.task_manager.complete_revocation(revoked)

    def _lose_partitions(self, lost: Iterable[Any]) -> None:
        if self._closing_dirty:
            return  # the tasks are closed already, the transaction aborted
        if self.config.exactly_once:
            # the open transaction holds the lost tasks' output too: abort it, and roll the
            # tasks that stay back to their last commit
            self.roll_back(StreamsError("partitions lost (evicted from the group)"))
        self.task_manager.handle_lost(lost)

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
            task_offset_sums=self.task_manager.task_offset_sums, owned_partitions=lambda: self.consumer.assignment(),
            clock_ms=self.wall_clock_ms)

    def _on_assignment(self, info: AssignmentInfo, partitions: frozenset) -> None:
        """Assignor callback (consumer IO thread, inside poll): record it for the loop."""
        self._pending_assignment = info
        self.committer.unblock()

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
            # A source topic deleted while the application runs (Kafka Streams:
            # MissingSourceTopicException), or only metadata that has not arrived yet.
            self.topic_watch.check()
            log.warning("%s: the group leader did not know the partitions of a source topic; no tasks until "
                        "its metadata arrives", self.name)
        active, standby, warmups = dict(info.active_tasks), dict(info.standby_tasks), set(info.warmup_tasks)
        self._set_state(StreamThreadState.PARTITIONS_ASSIGNED)
        self.task_manager.handle_assignment(active, standby, warmups)

        self.next_probing_rebalance_ms = info.next_rebalance_ms if info.next_rebalance_ms >= 0 else None
        log.info("%s: active %s, standby %s (warmup %s), next rebalance %s", self.name,
                 [str(t) for t in sorted(active)], [str(t) for t in sorted(set(standby) - set(active))],
                 [str(t) for t in sorted(warmups)], self.next_probing_rebalance_ms)

    def _maybe_request_rebalance(self, now: int) -> None:
        """Probing (are the warmups caught up?) and follow-up rebalances at their time."""
        due = self.next_probing_rebalance_ms
        if due is not None and now >= due:
            self.next_probing_rebalance_ms = None
            log.info("%s: requesting a %s rebalance", self.name, "follow-up" if due == 0 else "probing")
            request_rebalance(self.consumer)

    # ------------------------------------------------------------------ close

    def _close(self, *, clean: bool) -> None:
        """Clean: commit and checkpoint every task, then close it and leave the group.
        Dirty (after an error): commit nothing. Under exactly-once the open transaction
        holds what every task of this thread did since the last commit, the failed one's
        partial work included, so it is aborted first; then the tasks close without a
        checkpoint, and leaving the group (kafka-python's close revokes the partitions
        through the rebalance listener) commits nothing either."""
        self._safe_points.fail_all()
        if clean and self.consumer is not None:
            try:
                self.commit([t for t in self.tasks.values() if t.state is TaskState.RUNNING],
                            enforce_checkpoint=True)
            except Exception as exc:  # fall back to a dirty close
                log.exception("%s: final commit failed; closing tasks without committing", self.name)
                self.error = self.error or exc
                clean = False
        if not clean:
            self._closing_dirty = True
            if self.producer is not None:
                self.producer.abort_transaction()
        self.task_manager.close(clean=clean)
        for client, close in ((self.snapshot_taker, lambda c: c.close()),
                              (self.admin, lambda c: c.close()),
                              (self.consumer, lambda c: c.close(autocommit=False)),
                              (self.restore_consumer, lambda c: c.close(autocommit=False)),
                              (self.producer, lambda c: c.close(timeout=10))):
            if client is None:
                continue
            try:
                close(client)
            except Exception:  # best effort while shutting down
                log.exception("%s: error closing %s", self.name, type(client).__name__)
