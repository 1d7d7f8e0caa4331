"""Runtime nodes of one task: a source, processor or sink instance with its children.

Built from the topology's node specs when a task is created; a processor node holds
the task's own Processor instance (from the supplier), so two tasks never share one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_stateful_provider.streams.errors import (
    DeserializationError,
    ProcessingError,
    ProductionError,
    StreamsError,
    TopologyError,
    TransactionFailedError,
)
from airflow_stateful_provider.streams.processor import Processor, ProcessorContext, Record

if TYPE_CHECKING:
    from airflow_stateful_provider.streams.processing.record_collector import RecordCollector

__all__ = ["PASS_THROUGH", "ProcessorNode", "SinkNode", "SourceNode"]

#: Failures a processor node does not hand to the processing exception handler: a node
#: below already decided (ProcessingError), or they are not the processor's doing.
PASS_THROUGH = (ProcessingError, ProductionError, DeserializationError, TransactionFailedError)

#: ``on_error(node, record, exception)``: returns to skip the record below ``node``
#: (processing exception handler said CONTINUE), raises ProcessingError to fail.
ErrorCallback = Callable[["ProcessorNode", Record[Any, Any], Exception], None]


def _fail(node: ProcessorNode, record: Record[Any, Any], exc: Exception) -> None:
    raise exc


class ProcessorNode:
    __slots__ = ("name", "processor", "children", "children_by_name", "store_names", "context", "on_error")

    def __init__(self, name: str, processor: Processor[Any, Any] | None, store_names: tuple[str, ...] = ()) -> None:
        self.name = name
        self.processor = processor
        self.children: list[ProcessorNode] = []
        self.children_by_name: dict[str, ProcessorNode] = {}
        self.store_names = frozenset(store_names)
        self.context: ProcessorContext | None = None
        #: Set by the task: its processing exception handler (KIP-1033, node by node).
        self.on_error: ErrorCallback = _fail

    def add_child(self, child: ProcessorNode) -> None:
        self.children.append(child)
        self.children_by_name[child.name] = child

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        if self.processor is not None:
            self.processor.init(context)

    def process(self, record: Record[Any, Any]) -> None:
        try:
            # only source and sink nodes have no processor, and they override process(): no check per record
            self.processor.process(record)  # type: ignore[union-attr]
        except PASS_THROUGH:
            raise
        except Exception as exc:  # noqa: BLE001 - the processing exception handler decides
            self.on_error(self, record, exc)

    def close(self) -> None:
        if self.processor is not None:
            self.processor.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class SourceNode(ProcessorNode):
    """Entry of records read from a topic; deserialization already happened in the queue."""

    __slots__ = ("topics", "key_serde", "value_serde")

    def __init__(self, name: str, topics: tuple[str, ...], key_serde: Any, value_serde: Any) -> None:
        super().__init__(name, None)
        self.topics = topics
        self.key_serde = key_serde
        self.value_serde = value_serde

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record)  # type: ignore[union-attr]  # init() set it before any record


class SinkNode(ProcessorNode):
    """Serializes records and hands them to the task's record collector."""

    __slots__ = ("topic", "topic_extractor", "key_serde", "value_serde", "partitioner", "collector")

    def __init__(
        self,
        name: str,
        topic: str | None,
        topic_extractor: Any,
        key_serde: Any,
        value_serde: Any,
        partitioner: Any,
        collector: RecordCollector,
    ) -> None:
        super().__init__(name, None)
        self.topic = topic
        self.topic_extractor = topic_extractor
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.partitioner = partitioner
        self.collector = collector

    def add_child(self, child: ProcessorNode) -> None:  # pragma: no cover - topology forbids it
        raise TopologyError(f"sink {self.name!r} cannot have children")

    def process(self, record: Record[Any, Any]) -> None:
        topic = self.topic
        if topic is None:
            # init() set the context before any record; no None check per record
            topic = self.topic_extractor(record.key, record.value, self.context.record_metadata)  # type: ignore[union-attr]
            if not isinstance(topic, str) or not topic:
                raise StreamsError(
                    f"topic name extractor of sink {self.name!r} returned {topic!r} for key {record.key!r}"
                )
        self.collector.send(
            topic,
            record.key,
            record.value,
            record.timestamp,
            headers=record.headers,
            key_serde=self.key_serde,
            value_serde=self.value_serde,
            partitioner=self.partitioner,
            processor_node_id=self.name,
        )
