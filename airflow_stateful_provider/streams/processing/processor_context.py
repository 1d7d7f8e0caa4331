"""The ProcessorContext a task gives its processors.

One instance per task. The task sets ``current_node`` and ``record_context`` before
calling into a node, so ``forward`` knows whose children to call and
``record_metadata`` describes the input record (None while punctuating).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import IllegalStateError, StreamsError
from airflow_stateful_provider.streams.processing.error_handling import ErrorHandlerContext
from airflow_stateful_provider.streams.processing.processor_node import ProcessorNode
from airflow_stateful_provider.streams.processor import (
    Cancellable,
    ProcessorContext,
    PunctuationType,
    Punctuator,
    Record,
    RecordMetadata,
)
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = ["ContextTask", "ProcessorContextImpl"]


class ContextTask(Protocol):
    """What the context needs from its task (``StreamTask`` is one); the task builds the
    context, so the context names only this much of it."""

    id: TaskId
    config: StreamsConfig
    metrics: Any
    processor_metadata: dict[str, int]
    commit_needed: bool

    @property
    def stream_time(self) -> int: ...

    def wall_clock_ms(self) -> int: ...

    def schedule(self, node: ProcessorNode, interval_ms: int, punctuation_type: PunctuationType,
                 punctuator: Punctuator) -> Cancellable: ...

    def get_store(self, name: str) -> Any: ...

    def request_commit(self) -> None: ...


class ProcessorContextImpl(ProcessorContext):
    """Context of an active task (``standby=True`` for a standby: scheduling is refused)."""

    __slots__ = ("_task", "_standby", "current_node", "_record_context", "_input_raw", "_input_record", "timestamp")

    def __init__(self, task: ContextTask, *, standby: bool = False) -> None:
        self._task = task
        self._standby = standby
        self.current_node: ProcessorNode | None = None
        self._record_context: RecordMetadata | None = None
        #: The input record being processed, raw (topic, partition, offset) and typed; its
        #: RecordMetadata is built only when asked for (most records never are).
        self._input_raw: Any = None
        self._input_record: Record[Any, Any] | None = None
        #: Timestamp of the record being processed (the forwarded record's, downstream of a
        #: forward; the punctuation time in a punctuator). Changelog records carry it.
        self.timestamp = -1

    # -- metadata -------------------------------------------------------------
    @property
    def application_id(self) -> str:
        return self._task.config.application_id

    @property
    def task_id(self) -> TaskId:
        return self._task.id

    @property
    def config(self) -> Any:
        """The application's StreamsConfig (engine processors read tuning knobs from it)."""
        return self._task.config

    @property
    def app_configs(self) -> Mapping[str, Any]:
        return self._task.config.app_configs

    @property
    def record_context(self) -> RecordMetadata | None:
        """Metadata of the input record being processed; None during punctuation."""
        metadata = self._record_context
        if metadata is None and self._input_raw is not None:
            raw, record = self._input_raw, self._input_record
            # _input_record is set together with _input_raw (set_input)
            metadata = self._record_context = RecordMetadata(
                raw.topic, raw.partition, raw.offset, record.timestamp, record.headers)  # type: ignore[union-attr]
        return metadata

    @record_context.setter
    def record_context(self, metadata: RecordMetadata | None) -> None:
        self._record_context = metadata
        self._input_raw = self._input_record = None

    def set_input(self, raw: Any, record: Record[Any, Any]) -> None:
        """The input record about to be processed (``raw``: topic, partition, offset)."""
        self._record_context = None
        self._input_raw = raw
        self._input_record = record

    @property
    def record_metadata(self) -> RecordMetadata | None:
        return self.record_context

    def error_handler_context(self, node_name: str | None) -> ErrorHandlerContext:
        """What an exception handler is told about the input record being processed
        (no topic, partition and offset in a punctuator)."""
        raw, record = self._input_raw, self._input_record
        if raw is None or record is None:
            return ErrorHandlerContext(None, None, None, self.timestamp, (), node_name, self._task.id)
        return ErrorHandlerContext(raw.topic, raw.partition, raw.offset, record.timestamp, record.headers, node_name,
                                   self._task.id, raw.key, raw.value)

    @property
    def current_stream_time_ms(self) -> int:
        return self._task.stream_time

    @property
    def current_system_time_ms(self) -> int:
        return self._task.wall_clock_ms()

    @property
    def metrics(self) -> Any:
        return self._task.metrics

    @property
    def is_standby(self) -> bool:
        return self._standby

    # -- actions ---------------------------------------------------------------
    def forward(self, record: Record[Any, Any], child_name: str | None = None) -> None:
        node = self.current_node
        if node is None:
            raise IllegalStateError(
                f"forward() called outside process() or a punctuator in task {self._task.id}"
            )
        if not isinstance(record, Record):
            raise TypeError(f"forward() needs a Record, got {type(record).__name__} {record!r}")
        children: Sequence[ProcessorNode]
        if child_name is None:
            children = node.children
        else:
            child = node.children_by_name.get(child_name)
            if child is None:
                raise StreamsError(
                    f"processor {node.name!r} has no child named {child_name!r} "
                    f"(children: {[c.name for c in node.children]})"
                )
            children = (child,)
        previous_timestamp = self.timestamp
        self.timestamp = record.timestamp
        for child in children:
            self.current_node = child
            child.process(record)
        self.current_node = node
        self.timestamp = previous_timestamp

    def schedule(
        self,
        interval: int | timedelta,
        punctuation_type: PunctuationType,
        punctuator: Punctuator,
    ) -> Cancellable:
        if self._standby:
            raise IllegalStateError(
                f"schedule() is not allowed in standby task {self._task.id}: standbys do not process"
            )
        interval_ms = duration_ms(interval, "punctuation interval", minimum=1)
        if not isinstance(punctuation_type, PunctuationType):
            raise TypeError(f"punctuation type must be a PunctuationType, got {punctuation_type!r}")
        if not callable(punctuator):
            raise TypeError(f"punctuator must be callable with the punctuation time, got {punctuator!r}")
        node = self.current_node
        if node is None:
            raise IllegalStateError(
                "schedule() must be called from a processor's init(), process() or a punctuator"
            )
        return self._task.schedule(node, interval_ms, punctuation_type, punctuator)

    def get_state_store(self, name: str) -> Any:
        node = self.current_node
        if node is None:
            raise IllegalStateError(
                f"get_state_store({name!r}) must be called from a processor (init/process/punctuate)"
            )
        if name not in node.store_names:
            raise StreamsError(
                f"processor {node.name!r} has no access to state store {name!r}: the store is not "
                f"connected to it (connected: {sorted(node.store_names)}); pass the processor name to "
                f"add_state_store() or call connect_processor_and_state_stores()"
            )
        return self._task.get_store(name)

    def commit(self) -> None:
        self._task.request_commit()

    # -- engine-internal (Kafka's InternalProcessorContext) ---------------------------------
    def processor_metadata_for_key(self, key: str) -> int | None:
        """A value committed with the task's offsets (restored after a restart)."""
        return self._task.processor_metadata.get(key)

    def add_processor_metadata_key_value(self, key: str, value: int) -> None:
        self._task.processor_metadata[key] = value
        self._task.commit_needed = True
