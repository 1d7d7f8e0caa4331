"""A task's state stores: built from the topology's store builders, changelogged, typed.

For every store of its subtopology a task gets three layers:

1. the byte store from ``streams/state`` (RocksDB under
   ``<state_dir>/<application_id>/<task_id>/<store>/``, or in memory);
2. if logging is enabled, a changelogging layer: every write also goes to the
   changelog topic ``<application_id>-<store>-changelog``, partition = task partition,
   through the task's RecordCollector, stamped with the current record's timestamp
   (the version timestamp for versioned stores);
3. a typed facade (serdes) that processors get from ``context.get_state_store``;

and a record cache between 2 and 3 where the kind has one (session stores). The store's
builder (``state/<kind>/builder.py``) builds them from a ``StoreContext``: this module
knows no kind.

The runtime restores through :meth:`TaskStateManager.restore` (layer 1 directly, so
restoring never writes to the changelog) starting after
:meth:`TaskStateManager.checkpointed_offsets`, and checkpoints through
:meth:`TaskStateManager.checkpoint` (called by ``StreamTask.post_commit``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter, countOf
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import StreamsError
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.task_directories import (
    claim_task_dir,
    expected_identity,
    is_persistent_store,
)
from airflow_stateful_provider.streams.serdes import resolve_serde
from airflow_stateful_provider.streams.snapshots.taking import StoreToSnapshot
from airflow_stateful_provider.streams.state.common.builder import StoreBuilder, StoreContext
from airflow_stateful_provider.streams.state.common.checkpoint import OFFSET_UNKNOWN, OffsetCheckpoint
from airflow_stateful_provider.streams.state.common.cutoff import encode_cutoff
from airflow_stateful_provider.streams.state.common.kind import StoreKind
from airflow_stateful_provider.streams.state.common.rocksdb_memory import RocksDBMemory
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition
from airflow_stateful_provider.streams.topology.store_builders import changelog_topic_name
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["StoreEntry", "TaskStateManager"]

log = logging.getLogger(__name__)
_record_key = attrgetter("key")

#: Checkpoint on commit only after this many changelog offsets were applied since the
#: last write (docs/semantics.md §1); suspend/close/restore-complete always write.
CHECKPOINT_OFFSET_DELTA = 10_000


@dataclasses.dataclass
class StoreEntry:
    """Everything the task knows about one of its stores."""

    name: str
    builder: StoreBuilder
    raw: Any  # the byte store (restore into this)
    typed: Any  # what processors see
    persistent: bool
    changelog: TopicPartition | None  # None when logging is disabled
    cache: Any = None  # the record cache in the stack, if any (flush_cache() before flushing)
    retention: Any = None  # where retention is enforced when not on ``raw`` (BuiltStore.retention)

    @property
    def kind(self) -> StoreKind:
        return self.builder.kind


class TaskStateManager:
    """Builds and owns the stores of one task (see module docstring).

    ``store_type`` "in_memory" or "rocksdb" forces every store to that implementation
    (the TopologyTestDriver uses it); None follows each builder (and, for DSL stores
    without a choice, ``StreamsConfig.default_dsl_store``).
    """

    def __init__(
        self,
        task_id: TaskId,
        topology: Topology,
        config: StreamsConfig,
        *,
        record_collector: RecordCollector,
        store_type: str | None = None,
        timestamp: Callable[[], int] | None = None,
        rocksdb_memory: RocksDBMemory | None = None,
    ) -> None:
        if store_type not in (None, "in_memory", "rocksdb"):
            raise StreamsError(f"store_type must be 'in_memory', 'rocksdb' or None, got {store_type!r}")
        self.task_id = task_id
        self._topology = topology
        self._config = config
        self._collector = record_collector
        self._store_type = store_type
        #: Shared by all stores of the instance (state/common/rocksdb_memory.py); None: the process default.
        self._rocksdb_memory = rocksdb_memory
        #: Current record timestamp for changelog records; the task wires its context in.
        self.timestamp: Callable[[], int] = timestamp or (lambda: 0)
        #: Set while a record cache writes an entry through: the timestamp of the record
        #: that last touched it, not of the record being processed now.
        self._timestamp_override: int | None = None
        self.task_dir = config.task_state_dir(task_id)
        self._store_names = topology.subtopology(task_id.subtopology).store_names
        #: What the task directory must hold (task_directories.py); checked once, before use.
        self.identity = expected_identity(topology, config, task_id, store_type)
        self._claimed = False
        self._entries: dict[str, StoreEntry] = {}
        self._checkpoint = OffsetCheckpoint.in_task_dir(self.task_dir)
        self._checkpointed: dict[TopicPartition, int] = {}
        self._written: dict[TopicPartition, int] = {}
        self._open = False
        #: Exactly-once with ``transactional_state_stores=False`` (Kafka Streams' own way):
        #: the stores take writes of open transactions, so while the task processes there is
        #: no checkpoint file, and a store found without one is wiped and restored in full.
        self._unbuffered_eos = config.exactly_once and not config.transactional_state_stores
        #: Exactly-once with the buffer (the default): RocksDB stores take writes only at commit.
        self._transactional_stores = config.exactly_once and config.transactional_state_stores
        self._processing = False
        #: the stream time of the last commit, once the task told it (resume_from_commit)
        self._resume_time: int | None = None

    def bind_task(self, task: Any) -> None:
        """Called by StreamTask: changelog records take the timestamp of the record being
        processed (or the punctuation time) from the task's processor context."""
        context = task.context
        self.timestamp = lambda: context.timestamp

    # ------------------------------------------------------------------ lifecycle

    def claim_task_dir(self) -> None:
        """Refuse a task directory holding another application's or task's state
        (ForeignStateError, nothing touched), else record this task's identity in it. Before
        anything reads or replaces what the directory holds; once."""
        if not self._claimed:
            claim_task_dir(self.task_dir, self.identity)
            self._claimed = True

    def initialize(self) -> None:
        """Open (create) every store of the task and read the checkpoint file."""
        if self._open:
            return
        self.claim_task_dir()
        try:
            for name in self._store_names:
                self._entries[name] = self._build(self._topology.store_builder(name))
            if any(e.persistent for e in self._entries.values()):
                self._checkpointed = {
                    TopicPartition(tp[0], tp[1]): offset for tp, offset in self._checkpoint.read().items()
                }
            if self._unbuffered_eos:
                for entry in list(self._entries.values()):
                    if entry.persistent and entry.changelog is not None and entry.changelog not in self._checkpointed:
                        self.wipe_store(entry.name)  # may hold writes of an aborted transaction
        except BaseException:
            self._close_all(quiet=True)
            raise
        self._open = True

    def flush(self) -> None:
        """Write record caches through (changelog, downstream), then hand the transactional
        stores their in-memory state for the commit. The other stores flush their memtables
        after the commit (:meth:`commit_transaction`), not before (Kafka Streams too flushes
        its stores after the commit, when it checkpoints)."""
        for entry in self._entries.values():
            if entry.cache is not None:
                entry.cache.flush_cache()
        for entry in self._entries.values():
            if entry.raw.transactional:
                entry.raw.flush()

    def close(self) -> None:
        """Close every store. Under exactly-once, writes not yet committed are dropped: the
        stores stay at the last committed transaction."""
        self._close_all(quiet=False)
        self._open = False

    # ------------------------------------------------------------------ exactly-once

    def begin_processing(self) -> None:
        """The task starts processing: stores tuned for restoration serve reads again.
        Unbuffered exactly-once: from now on the stores may hold uncommitted writes, so the
        checkpoint file goes until the next clean stop."""
        for entry in self._entries.values():
            end_restoration = getattr(entry.raw, "end_restoration", None)
            if end_restoration is not None:
                end_restoration()
        if self._unbuffered_eos:
            self._processing = True
            self._checkpoint.delete()
            self._written = {}

    def end_processing(self) -> None:
        """The task stopped processing after a commit (suspend, clean close)."""
        self._processing = False

    def commit_transaction(self) -> None:
        """After the commit: exactly-once, write each persistent store's buffered writes to
        RocksDB (one write batch each, write-ahead logged); at-least-once, flush the stores'
        memtables. Either way a crash from here on finds the stores at this commit, and a
        crash before it at the previous one: at-least-once, files flushed before the input
        offsets committed would hold writes of records the task then processes again, and a
        session store would have expired (dropped) sessions those records belong to."""
        for entry in self._entries.values():
            if entry.raw.transactional:
                entry.raw.commit_transaction()
            else:
                entry.raw.flush()

    def resume_from_commit(self, stream_time: int) -> None:
        """The task resumes processing from its last commit, whose stream time (from the
        committed offsets' metadata) was ``stream_time``. At-least-once, the changelogs may
        hold writes of the records after that commit, which the task processes again: the
        session stores restore them without moving their clock past ``stream_time``
        (state/session.py). Before restoration."""
        self._resume_time = stream_time
        for entry in self._entries.values():
            self._resume(entry)

    def _resume(self, entry: StoreEntry) -> None:
        resume = getattr(entry.raw, "resume_from_commit", None)
        if resume is not None and self._resume_time is not None:
            resume(self._resume_time)

    def uncommitted_bytes(self) -> int:
        """Memory held by the stores' buffered writes (exactly-once; 0 otherwise)."""
        return sum(entry.raw.uncommitted_bytes for entry in self._entries.values())

    def _close_all(self, *, quiet: bool) -> None:
        first: BaseException | None = None
        for entry in self._entries.values():
            try:
                entry.raw.close()
            except Exception as exc:  # close every store, report the first failure
                log.exception("error closing store %s of task %s", entry.name, self.task_id)
                first = first or exc
        self._entries.clear()
        if first is not None and not quiet:
            raise StreamsError(f"failed to close a store of task {self.task_id}: {first!r}") from first

    # ------------------------------------------------------------------ access

    def get(self, name: str) -> Any:
        """The typed store processors see."""
        return self._entry(name).typed

    def kind(self, name: str) -> str:
        """The name of the store's kind: "key_value", "session", "versioned", ..."""
        return self._entry(name).kind.name

    def raw_store(self, name: str) -> Any:
        """The byte store underneath (restoration, maintenance)."""
        return self._entry(name).raw

    def entries(self) -> list[StoreEntry]:
        return list(self._entries.values())

    def changelog_partitions(self) -> dict[str, TopicPartition]:
        """Store name -> its changelog partition, for logged stores."""
        return {e.name: e.changelog for e in self._entries.values() if e.changelog is not None}

    def changelog_deletes_by_time(self, name: str) -> bool:
        """Whether the store's changelog also deletes old records (``cleanup.policy``
        ``compact,delete``: session stores). Retention then moves its log start, so a
        checkpoint below the log start is not a loss there (restoration/changelog_loss.py)."""
        policy = self._topology.store_builder(name).changelog_config().get("cleanup.policy", "")
        return "delete" in (part.strip() for part in policy.split(","))

    def store_for_changelog(self, partition: TopicPartition) -> StoreEntry:
        for entry in self._entries.values():
            if entry.changelog == partition:
                return entry
        raise StreamsError(f"task {self.task_id} has no store logged to {partition}")

    # ------------------------------------------------------------------ maintenance

    def enforce_retention(self, name: str, now_ms: int, *, write_cutoff: bool) -> dict[str, Any]:
        """Retention on the store ``name`` as of ``now_ms`` (its result as a dict). With
        ``write_cutoff`` (a running active task) a store with a changelog gets a tombstone for
        every row the run drops (session stores) and, when its cut-off moved, the cut-off
        marker (state/common/cutoff.py), through the task's collector: in the open transaction
        under exactly-once, flushed by the next commit under at-least-once. A restore, a
        standby and a snapshot's tail then reach the same cut-off, and compaction removes what
        was dropped. Other copies (``write_cutoff`` False) write nothing. Call it after
        :meth:`flush` (nothing cached lands after the drop)."""
        entry = self._entry(name)
        if entry.retention is not None:  # a key-value store's time to live: deletes are logged
            if not write_cutoff:
                return {"skipped": "time to live: applied by the active task, its deletes reach this copy "
                                   "through the changelog"}
            ttl: dict[str, Any] = entry.retention.enforce_retention(now_ms).as_dict()
            return ttl
        raw = entry.raw
        before = raw.retention_cutoff
        changelog = entry.changelog if write_cutoff else None  # only the running active writes
        written = 0
        # stamped with the wall clock: a cut-off may lie ahead (brokers refuse timestamps more
        # than an hour ahead) or far behind (a session changelog's time retention would delete
        # the marker before the records it judges)
        stamp = wall_clock_ms()
        if changelog is not None:
            # tombstones first, read before the drop: compaction then removes what the run
            # dropped, and a restore of the compacted changelog never reads it
            for key in raw.expiring_changelog_keys(now_ms):
                self._collector.send_bytes(changelog.topic, key, None, stamp, partition=changelog.partition)
                written += 1
        result = raw.enforce_retention(now_ms)
        if changelog is not None and result.cutoff_ms is not None and (before is None or result.cutoff_ms > before):
            self._collector.send_bytes(changelog.topic, raw.cutoff_marker_key, encode_cutoff(result.cutoff_ms),
                                       stamp, partition=changelog.partition)
            written += 1
        done: dict[str, Any] = dataclasses.replace(result, changelog_records_written=written).as_dict()
        return done

    # ------------------------------------------------------------------ restoration

    def checkpointed_offsets(self) -> dict[TopicPartition, int]:
        """Offsets of the last changelog record applied per changelog partition, from the
        checkpoint file (persistent stores only; -4 = unknown). Restore from offset + 1;
        a partition absent here restores from the beginning (docs/semantics.md §1)."""
        persistent = {e.changelog for e in self._entries.values() if e.persistent and e.changelog is not None}
        return {tp: off for tp, off in self._checkpointed.items() if tp in persistent and off != OFFSET_UNKNOWN}

    def restore(self, partition: TopicPartition, records: Iterable[Any]) -> int:
        """Apply changelog records (objects with ``key``, ``value``, ``offset``, ...) to
        the store logged to ``partition``, bypassing the changelog. Returns how many were
        restored: the records with a key (docs/semantics.md §2). The store may still drop some of
        them, as it drops writes into expired segments during processing."""
        entry = self.store_for_changelog(TopicPartition(partition[0], partition[1]))
        records = records if isinstance(records, list) else list(records)
        entry.raw.restore_batch(records)
        if entry.retention is not None:
            entry.retention.invalidate()  # a key-value TTL layer rebuilds its clock from the rows
        if not records:
            return 0
        if entry.changelog is not None:  # always: the entry was found by its changelog
            self._checkpointed[entry.changelog] = records[-1].offset
        return len(records) - countOf(map(_record_key, records), None)

    def wipe_store(self, name: str) -> None:
        """Drop a (corrupted) store's content and checkpoint entry; it is rebuilt empty
        (docs/semantics.md §2: it then replays its changelog from the log start)."""
        entry = self._entry(name)
        entry.raw.close()
        if entry.persistent:
            import shutil

            shutil.rmtree(os.path.join(self.task_dir, name), ignore_errors=True)
        if entry.changelog is not None:
            self._checkpointed.pop(entry.changelog, None)
        self._entries[name] = self._build(entry.builder)
        self._resume(self._entries[name])

    # ------------------------------------------------------------------ snapshots

    def persistent_changelogs(self) -> dict[str, TopicPartition]:
        """Store name -> changelog partition of the persistent logged stores, known before
        the stores are opened (a snapshot is loaded into their directories first)."""
        found = {}
        for name in self._store_names:
            builder = self._topology.store_builder(name)
            if builder.logging_enabled and self._is_persistent(builder):
                found[name] = TopicPartition(changelog_topic_name(self._config.application_id, name),
                                             self.task_id.partition)
        return found

    def snapshot_stores(self) -> list[StoreToSnapshot]:
        """The persistent logged stores with the changelog offset their content is at; call
        right after a commit (the stores then hold exactly that, and no uncommitted write)."""
        stores = []
        for entry in self._entries.values():
            if entry.persistent and entry.changelog is not None:
                offset = self._checkpointed.get(entry.changelog)
                known = offset if offset is not None and offset >= 0 else None  # unknown: replay it all
                stores.append(StoreToSnapshot(entry.name, entry.raw, entry.changelog[0], entry.changelog[1], known))
        return stores

    # ------------------------------------------------------------------ checkpoint

    def checkpoint(self, changelog_offsets: Mapping[TopicPartition, int], *, force: bool = False) -> bool:
        """Record the changelog offsets written by the task (from its RecordCollector).
        Writes the ``.checkpoint`` file when forced, or when more than 10,000 offsets were
        applied since the last write. Only persistent logged stores are checkpointed.
        Returns whether the file was written."""
        persistent = [e for e in self._entries.values() if e.persistent and e.changelog is not None]
        if not persistent:
            return False
        new = dict(self._checkpointed)
        for entry in persistent:
            changelog = entry.changelog
            offset = None if changelog is None else changelog_offsets.get(changelog)
            if changelog is not None and offset is not None:
                new[changelog] = offset
        written = self._written
        delta = sum(max(0, off - written.get(tp, -1)) for tp, off in new.items())
        self._checkpointed = new
        if not force and delta <= CHECKPOINT_OFFSET_DELTA or self._processing:
            return False
        # What the file claims must survive a kill -9: stores written without RocksDB's
        # write-ahead log (all but the transactional ones) flush their memtables first.
        for entry in persistent:
            if not entry.raw.transactional:
                entry.raw.flush()
        os.makedirs(self.task_dir, exist_ok=True)
        self._checkpoint.write({tp: off for tp, off in new.items() if tp in {e.changelog for e in persistent}})
        self._written = dict(new)
        return True

    # ------------------------------------------------------------------ internals

    def _entry(self, name: str) -> StoreEntry:
        try:
            return self._entries[name]
        except KeyError:
            raise StreamsError(
                f"task {self.task_id} has no open state store {name!r} (stores: {list(self._store_names)})"
            ) from None

    def _build(self, builder: StoreBuilder) -> StoreEntry:
        """The store's builder builds its stack (byte store, changelogging, cache, typed view)
        from what the task gives it."""
        if not isinstance(builder, StoreBuilder):
            raise StreamsError(
                f"store {builder.name!r}: unsupported store builder {type(builder).__name__}; build it with "
                f"Stores.key_value_store_builder / session_store_builder / versioned_key_value_store_builder "
                f"(or the StoreBuilder of another store kind)"
            )
        config = self._config
        what = f"store {builder.name!r}"
        key_serde = resolve_serde(builder.key_serde, config.default_key_serde, f"key serde of {what}")
        value_serde = resolve_serde(builder.value_serde, config.default_value_serde, f"value serde of {what}")
        persistent = self._is_persistent(builder)
        if persistent:
            os.makedirs(self.task_dir, exist_ok=True)
        changelog = None
        if builder.logging_enabled:
            changelog = TopicPartition(changelog_topic_name(config.application_id, builder.name),
                                       self.task_id.partition)
        cache_bytes = config.statestore_cache_max_bytes
        built = builder.build(StoreContext(
            path=os.path.join(self.task_dir, builder.name),
            persistent=persistent,
            # exactly-once: writes wait in a buffer until the transaction commits (common/transaction_buffer.py)
            transactional=self._transactional_stores,
            key_serde=key_serde,
            value_serde=value_serde,
            changelog=None if changelog is None else _CollectorChangelogWriter(self._collector, changelog),
            record_timestamp=self._current_timestamp,
            set_record_timestamp=self._set_timestamp_override,
            cache_max_bytes=cache_bytes // config.num_stream_threads if cache_bytes > 0 else None,
            rocksdb_memory=self._rocksdb_memory,
        ))
        return StoreEntry(builder.name, builder, built.raw, built.typed, persistent, changelog, built.cache,
                          built.retention)

    def _is_persistent(self, builder: StoreBuilder) -> bool:
        return is_persistent_store(builder, self._config, self._store_type)

    def _current_timestamp(self) -> int:
        override = self._timestamp_override
        return self.timestamp() if override is None else override

    def _set_timestamp_override(self, timestamp: int | None) -> None:
        self._timestamp_override = timestamp


class _CollectorChangelogWriter:
    """A ChangelogWriter sending to the task's changelog partition through its collector."""

    __slots__ = ("_send", "_topic", "_partition")

    def __init__(self, collector: RecordCollector, changelog: TopicPartition) -> None:
        self._send = collector.send_bytes
        self._topic, self._partition = changelog

    def send(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        self._send(self._topic, key, value, timestamp, partition=self._partition)
