"""The one way records leave a task: sinks, changelogs and dead-letter records.

A :class:`RecordCollector` serializes, picks the partition when the caller decides it,
hands the bytes to a producer and remembers the offsets acknowledged per partition
(the changelog offsets that a checkpoint records). The producer only needs the
subset of kafka-python's ``KafkaProducer`` used here (``send``, ``flush``,
``partitions_for``), so the real runtime passes a KafkaProducer and the
TopologyTestDriver an in-memory one.

A sink record that cannot be written (its key or value does not serialize, it is larger
than the producer's ``max_request_size``, the broker refuses it) goes to the production
exception handler (``error_handling.py``): FAIL raises :class:`ProductionError`, CONTINUE
drops it (task metric ``dropped-records``, reason "production"). A changelog or
dead-letter record is never skipped: its store would no longer match its changelog, or the
record it stands for would be lost. Under exactly-once an error the broker reports after
the send has already failed the transaction, so it fails the thread whatever the handler
says; only what the producer refuses before sending can be skipped there. Fencing errors
roll the thread back (TransactionFailedError); missing topics and timeouts are left to the
stream thread, which checks which topics still exist.

Inside :meth:`RecordCollector.batching` (a task's processing of a batch of input records,
its record cache flush) records whose partition is known wait in one list per partition
and reach the producer in one append per partition when the block ends: a few calls per
record instead of a whole ``KafkaProducer.send``. Nothing waits past the block, so a flush
or commit after it sees every record; a sink record that might be too large is sent at
once (as one that may not go to the default partition), so the production exception
handler still sees it with the input record it came from.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from airflow_stateful_provider.streams.errors import (
    ProductionError,
    SerializationError,
    StreamsError,
    TransactionFailedError,
)
from airflow_stateful_provider.streams.processing.error_handling import (
    ErrorHandlerContext,
    HandlerResult,
    LogAndFailProductionExceptionHandler,
    ProducedRecord,
    ProductionExceptionHandler,
    normalize_response,
)
from airflow_stateful_provider.streams.processing.streams_producer import is_fencing_error, is_record_error
from airflow_stateful_provider.streams.serdes import Serde
from airflow_stateful_provider.streams.topic_partition import TopicPartition

__all__ = ["Producer", "RecordCollector", "SerializationError", "ProductionError"]

log = logging.getLogger(__name__)

#: What a failed send's errback needs to rebuild the record: key, value, timestamp, headers, partition.
_SentRecord = tuple[bytes | None, bytes | None, int, Iterable[tuple[str, bytes | None]], int | None]


class Producer(Protocol):
    """The producer surface a collector needs (kafka-python's KafkaProducer fits)."""

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Any: ...

    def flush(self, timeout: float | None = None) -> None: ...

    def partitions_for(self, topic: str) -> Any: ...


#: ``partitioner(topic, key, value, num_partitions) -> partition or None`` (None = default).
StreamPartitioner = Callable[[str, Any, Any, int], int | None]

#: Records waiting for one partition inside ``batching`` before they are sent anyway.
MAX_WAITING_RECORDS = 5_000


class RecordCollector:
    """Sends a task's output through a producer and tracks produced offsets.

    One collector per task (so each task's changelog offsets are its own); several
    collectors may share one producer.
    """

    def __init__(self, producer: Producer, *, task_id: Any = None) -> None:
        self._producer = producer
        self._task_id = task_id
        # What the task tells (bind_task): the production exception handler, the guarantee,
        # ``(processor node) -> ErrorHandlerContext`` of the input record being processed,
        # and the counter of skipped records.
        self._handler: ProductionExceptionHandler = LogAndFailProductionExceptionHandler()
        self._exactly_once = False
        self._error_context: Callable[[str | None], ErrorHandlerContext] | None = None
        self._count_dropped: Callable[[str], None] = lambda reason: None
        self._offsets: dict[TopicPartition, int] = {}
        #: The last send result per (topic, partition) given by the caller, not yet asked
        #: for its offset: one callback per partition and checkpoint instead of one per record.
        self._last_sent: dict[tuple[str, int], Any] = {}
        self._send_error: BaseException | None = None
        #: Inside ``batching``: (topic, partition) -> [(key, value, timestamp)] waiting, and
        #: the processor node of each sink record among them ({index: node}); None outside.
        self._waiting: dict[tuple[str, int], list[tuple[bytes | None, bytes | None, int]]] | None = None
        self._waiting_nodes: dict[tuple[str, int], dict[int, str]] = {}
        self._send_batch = getattr(producer, "send_batch", None)
        self._default_partition = getattr(producer, "default_partition", None)
        #: Sink records with more key and value bytes are sent at once (module docstring).
        self._largest_waiting = getattr(producer, "largest_batched_record", 0)

    @property
    def producer(self) -> Producer:
        return self._producer

    def bind_task(self, handler: ProductionExceptionHandler, *, exactly_once: bool,
                  error_context: Callable[[str | None], ErrorHandlerContext],
                  count_dropped: Callable[[str], None]) -> None:
        """The task's production exception handler and guarantee, where its records come from
        (for the handler) and its count of skipped records."""
        self._handler = handler
        self._exactly_once = exactly_once
        self._error_context = error_context
        self._count_dropped = count_dropped

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
        """Serialize and send one sink record. ``key_serde``/``value_serde`` None means the key
        and value are already bytes (or None). A record that cannot be serialized or is too
        large goes to the production exception handler (module docstring)."""
        try:
            key_bytes = _serialize(key_serde, key, topic, "key", processor_node_id, self._task_id)
            value_bytes = _serialize(value_serde, value, topic, "value", processor_node_id, self._task_id)
        except SerializationError as exc:
            record = ProducedRecord(topic, key, value, timestamp, tuple(headers), partition)
            self._skip_or_fail(record, exc, processor_node_id)
            return
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
        if self._waiting is not None and not headers:
            if partition is None and key_bytes is not None and self._default_partition is not None:
                partition = self._default_partition(topic, key_bytes)
            if partition is not None:
                if _size(key_bytes, value_bytes) <= self._largest_waiting:
                    self._wait(topic, partition, key_bytes, value_bytes, timestamp, processor_node_id)
                    return
                self._send_waiting((topic, partition))  # keeps the partition's order
        self._send_sink(topic, key_bytes, value_bytes, timestamp, headers, partition, processor_node_id)

    def _send_sink(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                   headers: Iterable[tuple[str, bytes | None]], partition: int | None, node: str | None) -> None:
        try:
            self._send(topic, key, value, timestamp, headers, partition, node)
        except StreamsError:
            raise
        except Exception as exc:  # noqa: BLE001 - the record itself (see _send): the production handler decides
            record = ProducedRecord(topic, key, value, timestamp, tuple(headers), partition)
            self._skip_or_fail(record, exc, node)

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
        """Send an already serialized changelog or dead-letter record: it cannot be skipped."""
        if self._waiting is not None and partition is not None and not headers:
            self._wait(topic, partition, key, value, timestamp, None)
            return
        self._send_bytes_now(topic, key, value, timestamp, headers, partition)

    def _send_bytes_now(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                        headers: Iterable[tuple[str, bytes | None]], partition: int | None) -> None:
        try:
            self._send(topic, key, value, timestamp, headers, partition, None)
        except StreamsError:
            raise
        except Exception as exc:  # the record itself (see _send)
            raise ProductionError(f"cannot write a record of {_size(key, value)} bytes to {topic!r} for task "
                                  f"{self._task_id}: {exc}; a changelog or dead-letter record cannot be skipped "
                                  f"(raise max_request_size in producer_configs and the topic's "
                                  f"max.message.bytes, or keep the values smaller)", topic=topic) from exc

    @contextmanager
    def batching(self) -> Iterator[None]:
        """Records sent inside the block wait per partition and are sent when it ends (module
        docstring). Nested blocks are one; a producer without ``send_batch`` (the test
        driver's) sends each record at once."""
        if self._waiting is not None or self._send_batch is None:
            yield
            return
        self._waiting = {}
        try:
            yield
        except BaseException:
            # what was sent before the error is sent, as without batching; an error of
            # that send must not hide the one being raised
            try:
                self._send_all_waiting()
            except Exception:
                log.debug("task %s: sending the waiting records after an error failed", self._task_id,
                          exc_info=True)
            raise
        self._send_all_waiting()

    def _wait(self, topic: str, partition: int, key: bytes | None, value: bytes | None, timestamp: int,
              node: str | None) -> None:
        assert self._waiting is not None
        tp = (topic, partition)
        records = self._waiting.get(tp)
        if records is None:
            records = self._waiting[tp] = []
        if node is not None:
            nodes = self._waiting_nodes.get(tp)
            if nodes is None:
                nodes = self._waiting_nodes[tp] = {}
            nodes[len(records)] = node
        records.append((key, value, timestamp))
        if len(records) >= MAX_WAITING_RECORDS:
            self._send_waiting(tp)

    def _send_all_waiting(self) -> None:
        waiting = self._waiting
        try:
            while waiting:
                self._send_waiting(next(iter(waiting)))
        finally:
            self._waiting = None
            self._waiting_nodes.clear()

    def _send_waiting(self, tp: tuple[str, int]) -> None:
        """Send the records waiting for one partition in one append; if the producer refuses
        them (before appending any), one by one as without batching, so each refusal goes
        where it would have gone (the production exception handler, or ProductionError)."""
        assert self._waiting is not None and self._send_batch is not None
        records = self._waiting.pop(tp, None)
        nodes = self._waiting_nodes.pop(tp, {})
        if not records:
            return
        topic, partition = tp
        if self._send_error is not None:
            self._check_error()
        # the last changelog record's offset goes into the checkpoint (offsets())
        last = len(records) - 1
        while last in nodes:
            last -= 1
        tracked = sorted({*nodes, last} if last >= 0 else nodes)
        on_error = self._on_error
        try:
            # a changelog record's failure fails the task whichever record it is: the
            # producer reports a failed batch of them once (on_failure); a sink record's
            # failure goes to the handler with the record
            on_failure = functools.partial(on_error, topic, None, None)
            futures = self._send_batch(topic, partition, records, tracked, on_failure)
        except StreamsError:
            raise
        except Exception:  # noqa: BLE001 - refused before anything was appended: see each record's fate
            for i, (key, value, timestamp) in enumerate(records):
                node = nodes.get(i)
                if node is None:
                    self._send_bytes_now(topic, key, value, timestamp, (), partition)
                else:
                    self._send_sink(topic, key, value, timestamp, (), partition, node)
            return
        for i, node in nodes.items():
            key, value, timestamp = records[i]
            futures[i].add_errback(on_error, topic, node, (key, value, timestamp, (), partition))
        if last >= 0:
            futures[last].add_errback(on_error, topic, None, None)
            self._last_sent[tp] = futures[last]

    def _send(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
              headers: Iterable[tuple[str, bytes | None]], partition: int | None, node: str | None) -> None:
        """Hand one record to the producer. Raises a StreamsError for what is not the record's
        fault (an earlier failed send, fencing, no metadata for the topic), and the producer's
        own exception when it refused the record itself (too large, malformed)."""
        if self._send_error is not None:
            self._check_error()
        try:
            future = self._producer.send(
                topic,
                value=value,
                key=key,
                headers=list(headers) if headers else None,
                partition=partition,
                timestamp_ms=timestamp,
            )
        except StreamsError:
            raise
        except (ValueError, TypeError):
            raise  # kafka-python's checks of the record's fields
        except Exception as exc:
            if is_record_error(exc):
                raise
            raise ProductionError(f"cannot send a record to topic {topic!r} for task {self._task_id}: "
                                  f"{exc!r}", topic=topic) from exc
        add_errback = getattr(future, "add_errback", None)
        if add_errback is not None:
            if node is None:  # changelog or dead letter
                add_errback(self._on_error, topic, None, None)
            else:  # the record is built only if it fails
                add_errback(self._on_error, topic, node, (key, value, timestamp, headers, partition))
            if partition is not None:
                self._last_sent[(topic, partition)] = future

    def _skip_or_fail(self, record: ProducedRecord, exc: Exception, node: str | None) -> None:
        """The production exception handler decides about a sink record the producer refused
        before sending it (or that did not serialize): skip it, or raise ProductionError."""
        context = self._context(node)
        try:
            response = normalize_response(self._handler.handle(context, record, exc), self._handler)
        except Exception as handler_exc:
            raise ProductionError(f"production exception handler {self._handler!r} failed on a record for "
                                  f"{record.topic!r} ({context.describe()}): {handler_exc!r}",
                                  topic=record.topic) from handler_exc
        if response.result is HandlerResult.CONTINUE:
            self._count_dropped("production")
            return
        raise ProductionError(f"cannot write a record to {record.topic!r} ({context.describe()}): {exc}; the "
                              f"production exception handler said FAIL", topic=record.topic) from exc

    def _context(self, node: str | None) -> ErrorHandlerContext:
        if self._error_context is not None:
            return self._error_context(node)
        return ErrorHandlerContext(None, None, None, -1, (), node, self._task_id)

    def _on_success(self, metadata: Any) -> None:
        tp = TopicPartition(metadata.topic, metadata.partition)
        if metadata.offset > self._offsets.get(tp, -1):
            self._offsets[tp] = metadata.offset

    def _on_error(self, topic: str, node: str | None, sent: _SentRecord | None, exc: Exception) -> None:
        """Producer IO thread: a send failed (``add_errback(fn, *args)`` calls ``fn(*args,
        exception)``). ``node`` and ``sent`` (key, value, timestamp, headers, partition) are
        None for a changelog or dead-letter record."""
        if self._send_error is not None:
            return
        record = None if sent is None else ProducedRecord(topic, sent[0], sent[1], sent[2], tuple(sent[3]), sent[4])
        message = f"error sending a record to topic {topic!r} for task {self._task_id}: {exc!r}"
        if is_fencing_error(exc):
            # The transaction is lost, not the task: exactly-once rolls the thread's tasks
            # back to their last commit (Kafka Streams: TaskMigratedException).
            error: StreamsError = TransactionFailedError(f"{message}; the producer was fenced, the transaction "
                                                         f"is aborted", migrated=True)
        elif record is not None and is_record_error(exc) and not self._exactly_once:
            context = self._context(node)
            try:
                response = normalize_response(self._handler.handle(context, record, exc), self._handler)
            except Exception as handler_exc:  # noqa: BLE001 - reported on the stream thread
                error = ProductionError(f"production exception handler {self._handler!r} failed: {handler_exc!r}",
                                        topic=topic)
                error.__cause__ = handler_exc
                self._send_error = error
                return
            if response.result is HandlerResult.CONTINUE:
                self._count_dropped("production")
                return
            error = ProductionError(f"{message}; the production exception handler said FAIL", topic=topic)
        elif record is not None and is_record_error(exc):
            error = ProductionError(f"{message}; under exactly_once_v2 a record the broker refused has failed the "
                                    f"transaction, so it cannot be skipped: set max_request_size in producer_configs "
                                    f"to at most the topic's max.message.bytes, so the producer refuses such records "
                                    f"before sending them and the production exception handler can skip them",
                                    topic=topic)
        else:
            error = ProductionError(message, topic=topic)
        error.__cause__ = exc
        self._send_error = error

    def _check_error(self) -> None:
        if self._send_error is not None:
            error, self._send_error = self._send_error, None
            raise error

    def flush(self) -> None:
        """Block until every sent record is acknowledged; raises the first send error."""
        if self._waiting:
            self._send_all_waiting()
            self._waiting = {}
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


def _serialize(serde: Serde | None, data: Any, topic: str, what: str, node: str | None, task_id: Any) -> bytes | None:
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


def _size(key: bytes | None, value: bytes | None) -> int:
    return (len(key) if key else 0) + (len(value) if value else 0)
