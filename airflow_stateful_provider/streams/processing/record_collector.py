"""The one way records leave a task: sinks, changelogs and dead-letter records.

A :class:`RecordCollector` serializes, picks the partition when the caller decides it,
hands the bytes to a producer and remembers the offsets acknowledged per partition
(the changelog offsets that a checkpoint records). The producer only needs the
subset of kafka-python's ``KafkaProducer`` used here (``send``, ``flush``,
``partitions_for``), so the real runtime passes a KafkaProducer and the
TopologyTestDriver an in-memory one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from airflow_stateful_provider.streams.errors import SerializationError, StreamsError, TransactionFailedError
from airflow_stateful_provider.streams.processing.records import TopicPartition
from airflow_stateful_provider.streams.processing.streams_producer import is_fencing_error

__all__ = ["Producer", "RecordCollector", "SerializationError", "ProductionError"]

log = logging.getLogger(__name__)


class ProductionError(StreamsError):
    """The producer failed to send a record (raised on the next send or flush). A fencing
    error is raised as TransactionFailedError instead."""


class Producer(Protocol):
    """The producer surface a collector needs (kafka-python's KafkaProducer fits)."""

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Any: ...

    def flush(self, timeout: float | None = None) -> None: ...

    def partitions_for(self, topic: str) -> Any: ...


#: ``partitioner(topic, key, value, num_partitions) -> partition or None`` (None = default).
StreamPartitioner = Callable[[str, Any, Any, int], int | None]


class RecordCollector:
    """Sends a task's output through a producer and tracks produced offsets.

    One collector per task (so each task's changelog offsets are its own); several
    collectors may share one producer.
    """

    def __init__(self, producer: Producer, *, task_id: Any = None) -> None:
        self._producer = producer
        self._task_id = task_id
        self._offsets: dict[TopicPartition, int] = {}
        #: The last send result per (topic, partition) given by the caller, not yet asked
        #: for its offset: one callback per partition and checkpoint instead of one per record.
        self._last_sent: dict[tuple[str, int], Any] = {}
        self._send_error: BaseException | None = None

    @property
    def producer(self) -> Producer:
        return self._producer

    def send(
        self,
        topic: str,
        key: Any,
        value: Any,
        timestamp: int,
        *,
        headers: Iterable[tuple[str, bytes | None]] = (),
        key_serde: Any = None,
        value_serde: Any = None,
        partition: int | None = None,
        partitioner: StreamPartitioner | None = None,
        processor_node_id: str | None = None,
    ) -> None:
        """Serialize and send one record. ``key_serde``/``value_serde`` None means the key
        and value are already bytes (or None)."""
        key_bytes = _serialize(key_serde, key, topic, "key", processor_node_id, self._task_id)
        value_bytes = _serialize(value_serde, value, topic, "value", processor_node_id, self._task_id)
        if partition is None and partitioner is not None:
            partitions = self._producer.partitions_for(topic)
            if not partitions:
                raise StreamsError(
                    f"cannot partition a record for topic {topic!r}: the producer knows no "
                    f"partitions for it (does the topic exist?)"
                )
            partition = partitioner(topic, key, value, len(partitions))
            if partition is not None and not 0 <= partition < len(partitions):
                raise StreamsError(
                    f"partitioner of node {processor_node_id!r} returned partition {partition} "
                    f"for topic {topic!r}, which has {len(partitions)} partitions"
                )
        self.send_bytes(topic, key_bytes, value_bytes, timestamp, headers=headers, partition=partition)

    def send_bytes(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        *,
        headers: Iterable[tuple[str, bytes | None]] = (),
        partition: int | None = None,
    ) -> None:
        """Send an already serialized record (changelogs, dead letters)."""
        if self._send_error is not None:
            self._check_error()
        future = self._producer.send(
            topic,
            value=value,
            key=key,
            headers=list(headers) if headers else None,
            partition=partition,
            timestamp_ms=timestamp,
        )
        add_errback = getattr(future, "add_errback", None)
        if add_errback is not None:
            add_errback(self._on_error, topic)
            if partition is not None:
                self._last_sent[(topic, partition)] = future

    def _on_success(self, metadata: Any) -> None:
        tp = TopicPartition(metadata.topic, metadata.partition)
        if metadata.offset > self._offsets.get(tp, -1):
            self._offsets[tp] = metadata.offset

    def _on_error(self, topic: str, exc: BaseException) -> None:
        # add_errback(fn, topic) calls fn(topic, exception): bound arguments come first
        if self._send_error is None:
            message = f"error sending a record to topic {topic!r} for task {self._task_id}: {exc!r}"
            if is_fencing_error(exc):
                # The transaction is lost, not the task: exactly-once rolls the thread's tasks
                # back to their last commit (Kafka Streams: TaskMigratedException).
                self._send_error = TransactionFailedError(f"{message}; the producer was fenced, the transaction "
                                                          f"is aborted", migrated=True)
            else:
                self._send_error = ProductionError(message)
            self._send_error.__cause__ = exc

    def _check_error(self) -> None:
        if self._send_error is not None:
            error, self._send_error = self._send_error, None
            raise error

    def flush(self) -> None:
        """Block until every sent record is acknowledged; raises the first send error."""
        self._producer.flush()
        self._check_error()

    def offsets(self) -> dict[TopicPartition, int]:
        """Offset of the last acknowledged record per partition this task wrote to with an
        explicit partition (changelogs: what a checkpoint records). The offsets come from
        the last record sent to each partition; after :meth:`flush` all are acknowledged."""
        last_sent, self._last_sent = self._last_sent, {}
        for future in last_sent.values():
            future.add_callback(self._on_success)  # at once when acknowledged, else on acknowledgement
        return dict(self._offsets)

    def close(self) -> None:
        """Nothing of its own to release; the producer belongs to the caller."""


def _serialize(serde: Any, data: Any, topic: str, what: str, node: str | None, task_id: Any) -> bytes | None:
    if serde is None:
        if data is None or isinstance(data, (bytes, bytearray, memoryview)):
            return None if data is None else bytes(data)
        raise SerializationError(
            f"{what} {data!r} for topic {topic!r} (node {node!r}, task {task_id}) is not bytes "
            f"and no serde was given"
        )
    if data is None:
        return None
    try:
        return serde.serialize(data)
    except Exception as exc:
        raise SerializationError(
            f"cannot serialize {what} {data!r} for topic {topic!r} with {serde!r} "
            f"(node {node!r}, task {task_id}): {exc}"
        ) from exc
