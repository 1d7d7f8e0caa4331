"""StreamTask: one partition of one subtopology, the unit of processing.

Both the TopologyTestDriver and the Kafka-backed runtime drive tasks through the
same calls::

    task = StreamTask(task_id, topology, config, record_collector=collector,
                      stores=state_manager, wall_clock=clock)
    task.initialize()                  # CREATED -> RESTORING (stores opened)
    ...restore the changelogs of task.stores...
    task.initialize_task_time(committed_offsets_and_metadata)   # optional, after restart
    task.complete_restoration()        # RESTORING -> RUNNING (processors init)
    loop:
        task.add_records(partition, consumed_records)
        while task.is_processable(now) and task.process(now):
            task.maybe_punctuate_stream_time()
        task.maybe_punctuate_system_time()
        if task.commit_needed (and interval elapsed) or task.commit_requested:
            offsets = task.prepare_commit()     # flush stores + producer
            consumer.commit(offsets)
            task.post_commit()                  # checkpoint
    task.suspend() / task.close(clean=True)

A task is single-threaded: call it from one thread at a time.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, cast

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import IllegalStateError, ProcessingError, StreamsError
from airflow_stateful_provider.streams.processing.deserialization import deserialization_handler_from_config
from airflow_stateful_provider.streams.processing.error_handling import (
    ErrorHandlerContext,
    ask_processing_handler,
    processing_handler_from_config,
    production_handler_from_config,
)
from airflow_stateful_provider.streams.processing.metrics import TaskMetrics
from airflow_stateful_provider.streams.processing.partition_group import UNKNOWN, PartitionGroup, RecordQueue
from airflow_stateful_provider.streams.processing.processor_context import ProcessorContextImpl
from airflow_stateful_provider.streams.processing.processor_node import (
    PASS_THROUGH,
    ProcessorNode,
    SinkNode,
    SourceNode,
)
from airflow_stateful_provider.streams.processing.punctuation import PunctuationQueue, PunctuationSchedule
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.record_intake import record_deserializer
from airflow_stateful_provider.streams.processing.records import (
    OffsetAndMetadata,
    decode_commit_metadata,
    encode_commit_metadata,
)
from airflow_stateful_provider.streams.processing.timestamp_extractors import extractor_from_config
from airflow_stateful_provider.streams.processor import Cancellable, PunctuationType, Punctuator, Record
from airflow_stateful_provider.streams.serdes import resolve_serde
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition
from airflow_stateful_provider.streams.topology.nodes import ProcessorNodeSpec, SinkNodeSpec, SourceNodeSpec
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["StreamTask", "TaskState", "TaskStores"]

log = logging.getLogger(__name__)


class TaskState(enum.Enum):
    CREATED = "CREATED"
    RESTORING = "RESTORING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    CLOSED = "CLOSED"


class TaskStores(Protocol):
    """The task's state stores, as the task needs them (a state manager implements more:
    restoration and checkpoints, driven by the runtime)."""

    def get(self, name: str) -> Any:
        """The store processors see (typed)."""

    def flush(self) -> None: ...

    def close(self) -> None: ...


class _NoStores:
    """The stores of a task whose topology has none."""

    def get(self, name: str) -> Any:
        raise StreamsError(f"task has no state store {name!r}")

    def flush(self) -> None: ...

    def close(self) -> None: ...


class StreamTask:
    """An active task: buffers its partitions' records, runs them through its
    subtopology one at a time in timestamp order, fires punctuations, and exposes
    the hooks of the commit protocol."""

    def __init__(
        self,
        task_id: TaskId,
        topology: Topology,
        config: StreamsConfig,
        *,
        record_collector: RecordCollector,
        stores: TaskStores | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        wall_clock: Callable[[], int] = wall_clock_ms,
        fetched_lag: Callable[[TopicPartition], int | None] | None = None,
        consumer_position: Callable[[TopicPartition], int | None] | None = None,
    ) -> None:
        self.id = task_id
        self.config = config
        self.topology = topology
        self.subtopology = topology.subtopology(task_id.subtopology)
        self.record_collector = record_collector
        self.stores: TaskStores = stores if stores is not None else _NoStores()
        self.wall_clock_ms = wall_clock
        #: The consumer's next offset to fetch of a partition (local, no network), or None.
        self._consumer_position = consumer_position
        self.metrics = TaskMetrics(task_id)
        self.state = TaskState.CREATED
        self.commit_needed = False
        self.commit_requested = False
        self.context = ProcessorContextImpl(self)
        bind = getattr(self.stores, "bind_task", None)
        if bind is not None:
            bind(self)
        self._handler = deserialization_handler_from_config(config.deserialization_exception_handler)
        self._processing_handler = processing_handler_from_config(config.processing_exception_handler)
        self._timestamps = extractor_from_config(config.default_timestamp_extractor, "default_timestamp_extractor")
        record_collector.bind_task(production_handler_from_config(config.production_exception_handler),
                                   exactly_once=config.exactly_once,
                                   error_context=lambda node: self.context.error_handler_context(node),
                                   count_dropped=self.metrics.record_dropped)
        self._stream_queue = PunctuationQueue()
        self._wall_queue = PunctuationQueue()
        self._consumed: dict[TopicPartition, int] = {}
        #: The committed offsets the task started from (its position before it processes).
        self._committed_at_start: dict[TopicPartition, int] = {}
        #: Small per-task values processors keep across restarts, committed with the input
        #: offsets (e.g. emit-on-close aggregations: the last window close time emitted).
        self.processor_metadata: dict[str, int] = {}

        app = config.application_id
        self._nodes: dict[str, ProcessorNode] = {}
        self._sources_by_topic: dict[str, SourceNode] = {}
        for name in self.subtopology.nodes:
            spec = topology.node(name)
            if isinstance(spec, SourceNodeSpec):
                source_node = SourceNode(
                    name,
                    tuple(topology.decorate_topic(t, app) for t in spec.topics),
                    resolve_serde(spec.key_serde, config.default_key_serde, f"key serde of source {name!r}"),
                    resolve_serde(spec.value_serde, config.default_value_serde, f"value serde of source {name!r}"),
                )
                for topic in source_node.topics:
                    self._sources_by_topic[topic] = source_node
                node: ProcessorNode = source_node
            elif isinstance(spec, SinkNodeSpec):
                fixed = spec.topic if isinstance(spec.topic, str) else None
                node = SinkNode(
                    name,
                    topology.decorate_topic(fixed, app) if fixed is not None else None,
                    None if fixed is not None else spec.topic,
                    resolve_serde(spec.key_serde, config.default_key_serde, f"key serde of sink {name!r}"),
                    resolve_serde(spec.value_serde, config.default_value_serde, f"value serde of sink {name!r}"),
                    spec.partitioner,
                    record_collector,
                )
            else:
                assert isinstance(spec, ProcessorNodeSpec)
                processor = spec.supplier()
                if processor is None or not callable(getattr(processor, "process", None)):
                    raise StreamsError(
                        f"supplier of processor {name!r} returned {processor!r}, not a Processor"
                    )
                node = ProcessorNode(name, processor, tuple(topology.stores_of(name)))
                node.on_error = self._processing_failed
            self._nodes[name] = node
        for name, node in self._nodes.items():
            for child in topology.children(name):
                node.add_child(self._nodes[child])

        if partitions is None:
            partitions = [TopicPartition(t, task_id.partition) for t in self._sources_by_topic]
        queues: dict[TopicPartition, RecordQueue] = {}
        for tp in partitions:
            tp = TopicPartition(tp[0], tp[1])
            source = self._sources_by_topic.get(tp.topic)
            if source is None:
                raise StreamsError(
                    f"partition {tp} is not read by subtopology {task_id.subtopology} of task {task_id} "
                    f"(its topics: {sorted(self._sources_by_topic)})"
                )
            queues[tp] = RecordQueue(tp, source.name, record_deserializer(
                source, task_id, self._handler, self._timestamps, self.record_collector, self.metrics))
        self.partitions = list(queues)
        idle_ms = cast(int, config.max_task_idle_ms)  # StreamsConfig.__post_init__ made every duration an int
        self._partition_group = PartitionGroup(queues, max_task_idle_ms=idle_ms, fetched_lag=fetched_lag)

    # ------------------------------------------------------------------ lifecycle

    def initialize(self) -> None:
        """CREATED -> RESTORING: open the stores (``stores.initialize()`` if it has one).
        The runtime then restores their changelogs before :meth:`complete_restoration`."""
        self._require(TaskState.CREATED, TaskState.SUSPENDED, action="initialize")
        if self.state is TaskState.CREATED:
            init = getattr(self.stores, "initialize", None)
            if init is not None:
                init()
        self.state = TaskState.RESTORING

    def complete_restoration(self) -> None:
        """RESTORING -> RUNNING: initialize the processors (they may schedule punctuations)."""
        self._require(TaskState.RESTORING, action="complete restoration")
        ctx = self.context
        for node in self._nodes.values():
            ctx.current_node = node
            try:
                node.init(ctx)
            except StreamsError:
                raise
            except Exception as exc:
                raise ProcessingError(
                    f"failed to initialize processor {node.name!r} in task {self.id}: {exc!r}"
                ) from exc
            finally:
                ctx.current_node = None
        begin = getattr(self.stores, "begin_processing", None)
        if begin is not None:
            begin()
        self.state = TaskState.RUNNING

    def initialize_task_time(self, committed: Mapping[TopicPartition, Any]) -> None:
        """Restore partition (and so stream) time and processor metadata from the committed
        offsets' metadata (values: OffsetAndMetadata, a metadata string, or kafka-python's
        OffsetAndMetadata), and tell the stores the stream time processing resumes from
        (``resume_from_commit``). Call before restoration and :meth:`complete_restoration`."""
        for tp, value in committed.items():
            tp = TopicPartition(tp[0], tp[1])
            if tp not in self._partition_group.partitions or value is None:
                continue
            offset = getattr(value, "offset", None)
            if isinstance(offset, int) and offset >= 0:
                self._committed_at_start[tp] = offset
            metadata = value if isinstance(value, str) else getattr(value, "metadata", "")
            partition_time, processor_metadata = decode_commit_metadata(metadata)
            if partition_time != UNKNOWN:
                self._partition_group.set_partition_time(tp, partition_time)
            for key, number in processor_metadata.items():
                if number > self.processor_metadata.get(key, UNKNOWN):
                    self.processor_metadata[key] = number
        resume = getattr(self.stores, "resume_from_commit", None)
        if resume is not None and self.stream_time != UNKNOWN:
            resume(self.stream_time)

    def suspend(self) -> None:
        """Stop processing (revocation): close the processors, drop buffered input and
        schedules, flush and checkpoint. The stores stay open; :meth:`resume` continues
        from RESTORING. Commit the task's offsets first (prepare_commit/post_commit)."""
        if self.state in (TaskState.SUSPENDED, TaskState.CLOSED):
            return
        if self.state is TaskState.RUNNING:
            self._close_topology(clean=True)
        self._partition_group.clear()
        self._write_checkpoint()
        self.state = TaskState.SUSPENDED

    def resume(self) -> None:
        """SUSPENDED -> RESTORING (then :meth:`complete_restoration` again)."""
        self._require(TaskState.SUSPENDED, action="resume")
        self.state = TaskState.RESTORING

    def close(self, *, clean: bool = True) -> None:
        """Close processors and stores. A clean close flushes and writes the checkpoint
        (commit the input offsets first); ``clean=False`` after an error: no flush, no
        checkpoint, never raises."""
        if self.state is TaskState.CLOSED:
            return
        failed = False
        try:
            if self.state is TaskState.RUNNING:
                self._close_topology(clean=clean)
            self._partition_group.clear()
            self._stream_queue.close()
            self._wall_queue.close()
            if clean:
                self._write_checkpoint()
        except BaseException:
            failed = True
            raise
        finally:
            try:
                self.stores.close()
            except Exception:  # report, unless it is the only error of a clean close
                if clean and not failed:
                    raise
                log.exception("error closing the stores of task %s", self.id)
            finally:
                self.record_collector.close()
                self.state = TaskState.CLOSED

    # ------------------------------------------------------------------ input

    def add_records(self, partition: TopicPartition, records: Iterable[Any]) -> int:
        """Buffer consumed records of ``partition``; returns its buffered count (the
        runtime pauses the partition above ``buffered_records_per_partition``)."""
        if self.state is TaskState.CLOSED:
            raise IllegalStateError(f"task {self.id} is closed; cannot add records")
        return self._partition_group.add_raw_records(TopicPartition(partition[0], partition[1]), records)

    def has_records_queued(self) -> bool:
        return self._partition_group.num_buffered() > 0

    def num_buffered(self) -> int:
        return self._partition_group.num_buffered()

    def buffered_size(self, partition: TopicPartition) -> int:
        return self._partition_group.buffered_size(TopicPartition(partition[0], partition[1]))

    @property
    def stream_time(self) -> int:
        """Largest timestamp processed so far; -1 before the first record."""
        return self._partition_group.stream_time

    def partition_time(self, partition: TopicPartition) -> int:
        return self._partition_group.partition_time(TopicPartition(partition[0], partition[1]))

    # ------------------------------------------------------------------ processing

    def is_processable(self, wall_clock_ms: int | None = None) -> bool:
        """RUNNING with buffered input that can go now without breaking timestamp order."""
        if self.state is not TaskState.RUNNING:
            return False
        now = self.wall_clock_ms() if wall_clock_ms is None else wall_clock_ms
        return self._partition_group.ready_to_process(now)

    def process(self, wall_clock_ms: int | None = None) -> bool:
        """Process the next record (smallest timestamp first); False if none is buffered."""
        if self.state is not TaskState.RUNNING:
            raise IllegalStateError(f"task {self.id} is {self.state.value}, not RUNNING; cannot process")
        if not self._process_next():
            return False
        self.metrics.process_total += 1
        return True

    def process_batch(self, wall_clock_ms: int, max_records: int, deadline: float | None = None) -> int:
        """Process up to ``max_records`` records while the task is processable (the same as
        ``while is_processable(now) and process(now): maybe_punctuate_stream_time()``, in
        one call per batch instead of three per record), and no longer than until
        ``deadline`` (time.monotonic(), looked at every 32 records); returns how many were
        processed."""
        group = self._partition_group
        stream_queue = self._stream_queue
        done = 0
        # what the batch writes reaches the producer per partition at its end (record_collector.py)
        try:
            with self.record_collector.batching():
                while done < max_records and self.state is TaskState.RUNNING and group.ready_to_process(wall_clock_ms):
                    if not self._process_next():
                        break
                    done += 1
                    if stream_queue:  # no stream-time schedule: nothing can be due
                        self.maybe_punctuate_stream_time()
                    if deadline is not None and not done & 31 and time.monotonic() > deadline:
                        break
        finally:
            self.metrics.process_total += done
        return done

    def _process_next(self) -> bool:
        polled = self._partition_group.next_record()
        if polled is None:
            return False
        record, raw, queue = polled
        ctx = self.context
        ctx.set_input(raw, record)
        ctx.timestamp = record.timestamp
        ctx.current_node = source = self._nodes[queue.source_node]
        try:
            source.process(record)
        except PASS_THROUGH:
            raise
        except Exception as exc:  # noqa: BLE001 - a sink right below the source (processor nodes handle their own)
            self._processing_failed(ctx.current_node or source, record, exc)
        finally:
            ctx.current_node = None
            ctx.record_context = None
        self._consumed[queue.partition] = raw.offset
        self.commit_needed = True
        return True

    def schedule(
        self, node: ProcessorNode, interval_ms: int, punctuation_type: PunctuationType, punctuator: Punctuator
    ) -> Cancellable:
        """Register a punctuation for ``node`` (called through the processor context).
        STREAM_TIME starts due at 0 (fires at the first check once stream time is known);
        WALL_CLOCK_TIME starts due at now + interval."""
        if punctuation_type is PunctuationType.STREAM_TIME:
            return self._stream_queue.schedule(PunctuationSchedule(node, 0, interval_ms, punctuator))
        return self._wall_queue.schedule(
            PunctuationSchedule(node, self.wall_clock_ms() + interval_ms, interval_ms, punctuator)
        )

    def maybe_punctuate_stream_time(self) -> bool:
        """Fire due STREAM_TIME punctuations at the current stream time (after processing)."""
        if self.state is not TaskState.RUNNING:
            return False
        stream_time = self._partition_group.stream_time
        if stream_time == UNKNOWN:
            return False
        fired = self._stream_queue.maybe_punctuate(stream_time, PunctuationType.STREAM_TIME, self._punctuate)
        if fired:
            self.commit_needed = True
        return fired

    def maybe_punctuate_system_time(self) -> bool:
        """Fire due WALL_CLOCK_TIME punctuations (every loop iteration)."""
        if self.state is not TaskState.RUNNING:
            return False
        fired = self._wall_queue.maybe_punctuate(
            self.wall_clock_ms(), PunctuationType.WALL_CLOCK_TIME, self._punctuate
        )
        if fired:
            self.commit_needed = True
        return fired

    def _punctuate(self, node: ProcessorNode, now: int, type_: PunctuationType, punctuator: Punctuator) -> None:
        ctx = self.context
        if ctx.current_node is not None:
            raise IllegalStateError(
                f"punctuation of {node.name!r} started while processor {ctx.current_node.name!r} is running"
            )
        ctx.current_node = node
        ctx.record_context = None
        ctx.timestamp = now
        try:
            punctuator(now)
        except PASS_THROUGH:
            raise
        except Exception as exc:  # noqa: BLE001 - the processing exception handler decides
            self._punctuation_failed(node, exc, f"{type_.value} at {now}")
        finally:
            ctx.current_node = None
        self.metrics.punctuate_total += 1

    # ------------------------------------------------------------------ processing errors

    def _processing_failed(self, node: ProcessorNode, record: Record[Any, Any], exc: Exception) -> None:
        """A processor (or a sink right below a source) raised on ``record``: the processing
        exception handler decides (KIP-1033). CONTINUE skips the record below ``node`` (what
        was forwarded before stays) and counts it as dropped; FAIL raises ProcessingError."""
        ctx = self.context
        context = ctx.error_handler_context(node.name)
        if self._handle_processing_error(context, record, exc):
            self.metrics.record_dropped("processing")
            ctx.current_node = node  # as the parent's forward left it for this node
            ctx.timestamp = record.timestamp
            return
        where = f"topic {context.topic!r}, partition {context.partition}, offset {context.offset}" \
            if context.topic is not None else "no input record"
        raise ProcessingError(f"exception caught in process: task {self.id}, processor {node.name!r}, {where}: "
                              f"{exc!r}") from exc

    def _punctuation_failed(self, node: ProcessorNode, exc: Exception, when: str) -> None:
        """A punctuator raised: the processing exception handler decides, with no record."""
        context = self.context.error_handler_context(node.name)
        if self._handle_processing_error(context, None, exc):
            self.metrics.record_dropped("punctuation")
            return
        raise ProcessingError(f"exception caught while punctuating processor {node.name!r} in task {self.id} "
                              f"({when}): {exc!r}") from exc

    def _handle_processing_error(self, context: ErrorHandlerContext, record: Record[Any, Any] | None,
                                 exc: Exception) -> bool:
        send = self.record_collector.send_bytes
        return ask_processing_handler(self._processing_handler, context, record, exc,
                                      lambda d: send(d.topic, d.key, d.value, d.timestamp, headers=d.headers))

    # ------------------------------------------------------------------ commit

    def request_commit(self) -> None:
        self.commit_requested = True

    def prepare_commit(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Flush stores, then the producer; return the input offsets to commit (next offset
        to read, with the partition time as metadata). Commit them, then :meth:`post_commit`."""
        if self.state is TaskState.CLOSED:
            raise IllegalStateError(f"task {self.id} is closed; cannot commit")
        with self.record_collector.batching():
            self.stores.flush()
        self.record_collector.flush()
        return self.committable_offsets()

    def committable_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Next offset to read per consumed partition. When everything fetched of a partition
        is processed, the consumer's position is committed if it is further: it moved past
        transaction markers (exactly-once writers), which would otherwise stay behind the
        committed offset and show as lag forever (Kafka Streams does the same)."""
        offsets = {}
        for tp, offset in self._consumed.items():
            next_offset = offset + 1
            if self._consumer_position is not None and self._partition_group.buffered_size(tp) == 0:
                position = self._consumer_position(tp)
                if position is not None and position > next_offset:
                    next_offset = position
            offsets[tp] = OffsetAndMetadata(
                next_offset, encode_commit_metadata(self._partition_group.partition_time(tp), self.processor_metadata))
        return offsets

    def processed_position(self) -> dict[TopicPartition, int]:
        """Per input partition, the next offset whose record the stores do not reflect yet
        (interactive queries' position, docs/interactive-queries.md): after the last processed
        record, or the consumer's position when nothing of the partition waits in the buffer
        (past transaction markers, or where the task started when it processed nothing yet)."""
        position = {tp: om.offset for tp, om in self.committable_offsets().items()}
        for tp in self.partitions:
            if tp in position:
                continue
            offset = self._consumer_position(tp) if self._consumer_position is not None \
                and self._partition_group.buffered_size(tp) == 0 else None
            if offset is None:
                offset = self._committed_at_start.get(tp)
            if offset is not None:
                position[tp] = offset
        return position

    def post_commit(self, *, enforce_checkpoint: bool = False) -> None:
        """After the consumer (or, exactly-once, the transaction) committed: write the stores'
        buffered writes of the committed transaction, clear the commit flags and let the
        stores checkpoint the changelog offsets this task produced (if they support it)."""
        self.commit_needed = False
        self.commit_requested = False
        commit_stores = getattr(self.stores, "commit_transaction", None)
        if commit_stores is not None:
            commit_stores()
        checkpoint = getattr(self.stores, "checkpoint", None)
        if checkpoint is not None:
            checkpoint(self.record_collector.offsets(), force=enforce_checkpoint)

    # ------------------------------------------------------------------ stores

    def get_store(self, name: str) -> Any:
        if name not in self.subtopology.store_names:
            raise StreamsError(
                f"task {self.id} has no state store {name!r} (its stores: {list(self.subtopology.store_names)})"
            )
        return self.stores.get(name)

    # ------------------------------------------------------------------ internals

    def _write_checkpoint(self) -> None:
        """Flush stores and producer, then checkpoint unconditionally (docs/semantics.md §1: on
        suspend and close)."""
        with self.record_collector.batching():
            self.stores.flush()
        self.record_collector.flush()
        end = getattr(self.stores, "end_processing", None)
        if end is not None:
            end()
        checkpoint = getattr(self.stores, "checkpoint", None)
        if checkpoint is not None:
            checkpoint(self.record_collector.offsets(), force=True)

    def _close_topology(self, *, clean: bool) -> None:
        self._stream_queue.close()
        self._wall_queue.close()
        first_error: BaseException | None = None
        for node in self._nodes.values():
            try:
                node.close()
            except Exception as exc:  # close every node, report the first failure
                log.exception("error closing processor %s of task %s", node.name, self.id)
                if first_error is None:
                    first_error = exc
        if first_error is not None and clean:
            raise ProcessingError(f"failed to close a processor of task {self.id}: {first_error!r}") from first_error

    def _require(self, *states: TaskState, action: str) -> None:
        if self.state not in states:
            raise IllegalStateError(
                f"cannot {action} task {self.id} in state {self.state.value} "
                f"(allowed: {[s.value for s in states]})"
            )

    def __repr__(self) -> str:
        return f"StreamTask({self.id}, {self.state.value}, buffered={self.num_buffered()})"
