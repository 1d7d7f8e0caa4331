"""TaskCommitter: commits the tasks of one stream thread, and what follows a commit.

At-least-once, the running tasks' input offsets go to the group coordinator; exactly-once,
one transaction holds what every task of the thread wrote since the last commit, with the
input offsets inside it. Only after the commit succeeded do the tasks write their stores'
buffered writes and checkpoints (``post_commit``); a failed transaction rolls every running
task back to its last commit (the thread's ``roll_back``).

While the group rebalances it refuses commits: the committer then stops committing until the
next assignment (retrying would restart the rebalance), and a member whose commits stay
refused past the session timeout is outside its group (:meth:`recover_if_outside_group`).

Committed offsets of repartition topics are purged every ``repartition_purge_interval_ms``:
this application is their only reader and will never read those records again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, cast

from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import (
    CommitFailedError,
    IllegalGenerationError,
    KafkaError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from kafka.structs import OffsetAndMetadata as KafkaOffsetAndMetadata

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import TransactionFailedError
from airflow_stateful_provider.streams.instance.task_manager import TaskManager
from airflow_stateful_provider.streams.instance.thread_admin import ThreadAdmin
from airflow_stateful_provider.streams.kafka.group_join import request_rebalance
from airflow_stateful_provider.streams.processing.kafka_waits import KafkaWaits
from airflow_stateful_provider.streams.processing.metrics import ThreadMetrics
from airflow_stateful_provider.streams.processing.record_collector import ProductionError
from airflow_stateful_provider.streams.processing.records import OffsetAndMetadata
from airflow_stateful_provider.streams.processing.streams_producer import StreamsProducer
from airflow_stateful_provider.streams.processing.task import StreamTask, TaskState
from airflow_stateful_provider.streams.topic_partition import TopicPartition

__all__ = ["CommitOwner", "TaskCommitter"]

log = logging.getLogger(__name__)


class CommitOwner(Protocol):
    """What the committer uses of its stream thread: its name, clients and tasks, and its
    rollback (which closes and revives tasks)."""

    name: str
    consumer: Any
    producer: StreamsProducer | None
    task_manager: TaskManager
    #: Retries what the brokers cannot answer yet, up to the task timeout.
    kafka_waits: KafkaWaits

    def roll_back(self, cause: BaseException) -> None: ...


class TaskCommitter:
    """Commits one stream thread's tasks (see module docstring)."""

    def __init__(self, owner: CommitOwner, config: StreamsConfig, repartition_topics: set[str],
                 admin: ThreadAdmin, metrics: ThreadMetrics) -> None:
        self._owner = owner
        self.config = config
        self._repartition_topics = repartition_topics
        #: The thread's admin client, shared with its topic watch (thread_admin.py).
        self._admin = admin
        #: Gets each successful commit's latency (commit-latency-avg/max).
        self._metrics = metrics
        #: Committed offsets of repartition partitions not yet purged.
        self._purgeable: dict[TopicPartition, int] = {}
        self._last_purge_ms = 0
        #: Set when the group refused a commit because it is rebalancing; cleared by the
        #: next assignment. A failed commit makes kafka-python rejoin, so retrying it
        #: before the rebalance completes would restart the rebalance again and again.
        self.blocked = False
        #: When commits started being refused (monotonic s); see recover_if_outside_group.
        self._blocked_since: float | None = None
        self.last_commit_ms = 0
        #: StreamsConfig.__post_init__ made every duration setting int milliseconds.
        self._commit_interval_ms = cast(int, config.commit_interval_ms)
        self._purge_interval_ms = cast(int, config.repartition_purge_interval_ms)
        #: time.monotonic() of the last successful commit (benchmarks measure from it).
        self.last_committed_at: float | None = None
        #: Exactly-once: commit early once the stores' buffered writes pass this many bytes.
        self._uncommitted_max_bytes = config.statestore_uncommitted_max_bytes // config.num_stream_threads

    @property
    def _tasks(self) -> TaskManager:
        return self._owner.task_manager

    def unblock(self) -> None:
        """A new assignment arrived: the group accepts commits again."""
        self.blocked = False
        self._blocked_since = None

    def _block(self) -> None:
        self.blocked = True
        if self._blocked_since is None:
            self._blocked_since = time.monotonic()

    def maybe_commit(self, now: int) -> None:
        """Commit when the interval passed, a processor asked, or (exactly-once) the stores'
        buffered writes grew past their bound; then checkpoint the standbys."""
        if self.blocked:
            self.recover_if_outside_group()
            return
        requested = any(t.commit_requested for t in self._tasks.tasks.values()) or self._uncommitted_over_limit()
        if not requested and now - self.last_commit_ms < self._commit_interval_ms:
            return
        started = time.monotonic()
        committed = self.commit()
        if committed is None:
            return  # the group is rebalancing: commit once the new assignment arrives
        if committed:
            self._metrics.record_commit((time.monotonic() - started) * 1000)
        for standby in self._tasks.standby_tasks.values():
            standby.checkpoint()
        self._tasks.snapshot_idle()
        self.last_commit_ms = now

    def _uncommitted_over_limit(self) -> bool:
        if not self.config.exactly_once:
            return False
        return self._tasks.uncommitted_bytes() > self._uncommitted_max_bytes

    def commit(self, tasks: Iterable[StreamTask] | None = None, *, enforce_checkpoint: bool = False) -> int | None:
        """Commit the running tasks that processed or punctuated since their last commit.
        Returns how many offsets were committed, or None when the group refused the commit
        because it is rebalancing (the tasks stay "commit needed" and the caller retries)
        or, exactly-once, when the transaction failed and the tasks were rolled back."""
        if self.config.exactly_once:
            return self._commit_transaction(tasks, enforce_checkpoint=enforce_checkpoint)
        tasks = [t for t in (self._tasks.running_tasks() if tasks is None else tasks)
                 if t.commit_needed or t.commit_requested or enforce_checkpoint]
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for task in tasks:
            offsets.update(task.prepare_commit())
        if offsets:
            consumer = self._owner.consumer
            try:
                # bounded by the request timeout, and shown as the thread's wait meanwhile: a
                # coordinator that does not answer holds the thread here for that long
                with self._owner.kafka_waits.waiting_in("commit", "the group coordinator"):
                    consumer.commit(kafka_offsets(offsets), timeout_ms=consumer.config["request_timeout_ms"])
            except RebalanceInProgressError:
                # Cooperative rebalancing: tasks keep running meanwhile; commit after it.
                log.info("%s: commit deferred until the rebalance completes", self._owner.name)
                self._block()
                return None
            except (CommitFailedError, IllegalGenerationError, UnknownMemberIdError) as exc:
                # This member's generation is gone (e.g. evicted): its tasks are about to be
                # reported lost and their uncommitted records reprocessed by their next owner.
                log.warning("%s: commit rejected by the group (%s); uncommitted records will be processed "
                            "again", self._owner.name, type(exc).__name__)
                self._block()
                return None
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                # the group coordinator cannot answer yet (moving, loading, its broker down):
                # the tasks stay "commit needed", the next iteration commits again
                self._owner.kafka_waits.failed("commit (the group coordinator)", exc)
                log.warning("%s: commit failed (%r); committing again", self._owner.name, exc)
                return None
            self._owner.kafka_waits.succeeded()
        return self._committed(offsets, tasks, enforce_checkpoint=enforce_checkpoint)

    def _commit_transaction(self, tasks: Iterable[StreamTask] | None, *, enforce_checkpoint: bool) -> int | None:
        """Exactly-once: every task that processed commits now (one transaction holds them
        all), with the input offsets inside the transaction."""
        given = [] if tasks is None else [t for t in tasks if t.state is TaskState.RUNNING]
        committing = [t for t in self._tasks.running_tasks() if t.commit_needed or t.commit_requested]
        committing += [t for t in given if enforce_checkpoint and t not in committing]
        producer = self._owner.producer
        assert producer is not None
        if not committing and not producer.in_transaction:
            return 0
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        try:
            for task in committing:
                offsets.update(task.prepare_commit())
            producer.commit_transaction(kafka_offsets(offsets), self._owner.consumer.group_metadata())
        except (TransactionFailedError, ProductionError) as exc:
            self._owner.roll_back(exc)
            return None
        return self._committed(offsets, committing, enforce_checkpoint=enforce_checkpoint)

    def _committed(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], tasks: Iterable[StreamTask], *,
                   enforce_checkpoint: bool) -> int:
        """After a successful commit (either guarantee): note what may be purged, then let the
        tasks finish their commit (stores, checkpoints). Returns how many offsets were committed."""
        if offsets:
            self.last_committed_at = time.monotonic()
            for tp, om in offsets.items():
                if tp.topic in self._repartition_topics:
                    self._purgeable[tp] = om.offset
        for task in tasks:
            task.post_commit(enforce_checkpoint=enforce_checkpoint)
        self._tasks.snapshot_committed(tasks)
        return len(offsets)

    def recover_if_outside_group(self) -> None:
        """A member whose commits stay refused for longer than the session timeout, with no
        new assignment arriving, is no longer in the group: kafka-python 3.0.12 can finish a
        join after the poll that started it gave up and then believe it needs no rejoin,
        with heartbeats off. Its tasks belong to other members by now, so processing them
        would duplicate output and write the same changelogs twice: drop them without
        committing (their next owner reprocesses from the last commit) and rejoin."""
        since = self._blocked_since
        consumer = self._owner.consumer
        limit = consumer.config.get("session_timeout_ms", 45_000) / 1000 + 5
        if since is None or time.monotonic() - since < limit:
            return
        log.error("%s: commits refused for %.0f s without a new assignment: this member is outside its group; "
                  "dropping its active tasks without committing and rejoining", self._owner.name,
                  time.monotonic() - since)
        if self._owner.producer is not None:
            self._owner.producer.abort_transaction()
        self._tasks.drop_active_tasks()
        # Rewind to the last commits and fetch nothing until the new assignment: if these
        # partitions come back, their records since the commit are processed again, not skipped.
        assigned = list(consumer.assignment())
        for kafka_tp in assigned:
            committed = consumer.committed(kafka_tp)
            if committed is None or committed < 0:
                consumer.seek_to_beginning(kafka_tp)
            else:
                consumer.seek(kafka_tp, committed)
        self._tasks.pause([TopicPartition(tp.topic, tp.partition) for tp in assigned])
        self._blocked_since = time.monotonic()  # give the rejoin a full period
        request_rebalance(consumer)

    def maybe_purge_repartition_topics(self, now: int) -> None:
        """Delete repartition records below the committed offsets (see module docstring)."""
        interval = self._purge_interval_ms
        if not self._purgeable or now - self._last_purge_ms < interval:
            return
        self._last_purge_ms = now
        if not self._admin.available:
            return
        purge, self._purgeable = self._purgeable, {}
        try:
            self._admin.client().delete_records({KafkaTopicPartition(tp.topic, tp.partition): offset
                                          for tp, offset in purge.items()})
        except Exception as exc:  # noqa: BLE001 - purging is housekeeping; retry next interval
            log.warning("%s: purging repartition topics failed (%r); retrying in %d ms", self._owner.name, exc,
                        interval)
            for tp, offset in purge.items():
                self._purgeable.setdefault(tp, offset)


def kafka_offsets(offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> dict[KafkaTopicPartition,
                                                                                KafkaOffsetAndMetadata]:
    """The offsets as kafka-python's commit calls take them."""
    return {KafkaTopicPartition(tp.topic, tp.partition): KafkaOffsetAndMetadata(om.offset, om.metadata, -1)
            for tp, om in offsets.items()}
