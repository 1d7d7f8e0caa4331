"""StreamsProducer: the one producer a stream thread's tasks write through.

At-least-once it is a thin pass-through to kafka-python's ``KafkaProducer``. Under
exactly-once (``exactly_once_v2``, KIP-447) it owns the thread's transaction:

- one transactional producer per stream thread, ``transactional_id`` =
  ``<application_id>-<instance_id>-<thread index>``: stable across restarts of the same
  instance, so a restarted instance's ``init_transactions()`` aborts the transaction its
  killed predecessor left open (read_committed readers never wait for it to time out) and
  fences that predecessor if it is still alive (a zombie);
- a transaction begins with the first record sent after a commit, and ends with
  :meth:`commit_transaction`, which adds the input offsets (with the consumer's group
  metadata, so the group coordinator fences a member of an older generation) and commits
  output, changelog and repartition records and offsets at once; a consumer that is no
  longer a group member (no generation) never commits: the coordinator would not fence it;
- every failure of a transaction is reported as :class:`TransactionFailedError`, after
  which the producer is usable again (aborted, or recreated when kafka-python's
  transaction state is fatal). The caller must roll its tasks back to their last
  committed state: what they wrote since is gone.

Every transactional call waits at most the producer's ``max_block_ms`` (kafka/
transactional_calls.py); a call that timed out, or a coordinator that went away, fails the
transaction and the producer is replaced: the new one's ``init_transactions`` settles what
the old one left (an abort, or the completion of a commit the coordinator had accepted)
before the tasks read their committed offsets again. A producer that cannot be created
because no broker answers yet is retried until ``task_timeout_ms`` (kafka_waits.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from airflow_stateful_provider.streams.errors import StreamsError, TransactionFailedError
from airflow_stateful_provider.streams.kafka.batched_send import (
    append_records,
    default_partition,
    largest_unchecked_record,
)
from airflow_stateful_provider.streams.kafka.producer_close import close_producer, discard_unsent_records
from airflow_stateful_provider.streams.kafka.transactional_calls import (
    abort_transaction_within,
    commit_transaction_within,
    prepare_transactional_producer,
    send_offsets_to_transaction_within,
)
from airflow_stateful_provider.streams.processing.kafka_waits import KafkaWaits

__all__ = ["EOS_TRANSACTION_TIMEOUT_MS", "StreamsProducer", "TransactionFailedError", "is_fencing_error",
           "is_group_member", "is_record_error"]

log = logging.getLogger(__name__)

#: How long a flush waits before asking whether something is wrong (on_slow_flush).
FLUSH_CHECK_SECONDS = 10

#: How long a producer that could not be created waits before the next attempt.
PRODUCER_RETRY_BACKOFF_SECONDS = 1.0

#: Kafka Streams' ``transaction.timeout.ms`` under exactly-once: the broker aborts a
#: transaction left open longer (by an instance that died and did not come back).
EOS_TRANSACTION_TIMEOUT_MS = 10_000


def transactional_id(application_id: str, instance_id: str, thread_index: int) -> str:
    """Stable per instance and thread (see module docstring)."""
    return f"{application_id}-{instance_id}-{thread_index}"


class StreamsProducer:
    """Send, flush and (under exactly-once) commit the thread's transaction.

    ``factory(**overrides)`` builds a KafkaProducer; under exactly-once it is called again
    to replace a producer whose transaction state kafka-python marked fatal.
    """

    def __init__(self, factory: Callable[..., Any], *, client_id: str, transactional_id: str | None,
                 on_slow_flush: Callable[[BaseException], None] | None = None,
                 waits: KafkaWaits | None = None) -> None:
        self._factory = factory
        self._client_id = client_id
        self.transactional_id = transactional_id
        #: Where the thread's waits on Kafka are shown, and retried within the task timeout
        #: (a producer being retried is given up when the thread is asked to stop).
        self.waits = waits if waits is not None else KafkaWaits(300_000)
        #: Called every FLUSH_CHECK_SECONDS a flush waits (with the timeout error): it may
        #: raise, e.g. when the records wait for a topic that was deleted.
        self._on_slow_flush = on_slow_flush
        self._producer = self._new_producer()
        self._in_transaction = False
        if transactional_id is None:
            # at-least-once: nothing to add to each send (one call less per record)
            self.send = self._producer.send  # type: ignore[method-assign]  # the same signature, one call less

    def _new_producer(self) -> Any:
        """A new producer (exactly-once: initialized, which fences and settles the
        transactional id's previous producer), retried while no broker can answer, up to the
        task timeout (TaskTimeoutError then)."""
        from kafka.errors import KafkaError

        call = "init_transactions" if self.transactional_id is not None else "bootstrap"
        while True:
            try:
                with self.waits.waiting_in(call, f"the brokers, for producer {self._client_id}"):
                    producer = self._try_new_producer()
                if self.transactional_id is None:
                    self.waits.succeeded()  # exactly-once: a committed transaction says so
                return producer
            except KafkaError as exc:
                if not exc.retriable or self.waits.interrupted.is_set():
                    raise
                self.waits.failed(f"{call} of producer {self.transactional_id or self._client_id}", exc)
                log.warning("%s: %s failed (%r); retrying", self._client_id, call, exc)
                self.waits.interrupted.wait(PRODUCER_RETRY_BACKOFF_SECONDS)

    def _try_new_producer(self) -> Any:
        if self.transactional_id is None:
            return self._factory(client_id=self._client_id)
        producer = self._factory(client_id=self._client_id, transactional_id=self.transactional_id)
        try:
            prepare_transactional_producer(producer)
            producer.init_transactions()
        except BaseException:
            _close_quietly(producer)
            raise
        return producer

    @property
    def _call_timeout_ms(self) -> int:
        """The bound of one transactional call: the producer's ``max_block_ms``."""
        return int(self._producer.config.get("max_block_ms", 60_000))

    # ------------------------------------------------------------------ the Producer protocol

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: list[tuple[str, bytes]] | None = None, partition: int | None = None,
             timestamp_ms: int | None = None) -> Any:
        return self._in_transaction_do(topic, self._producer.send, topic, value=value, key=key, headers=headers,
                                       partition=partition, timestamp_ms=timestamp_ms)

    def send_batch(self, topic: str, partition: int, records: Sequence[tuple[bytes | None, bytes | None, int]],
                   tracked: Iterable[int], on_failure: Callable[[Exception], None]) -> dict[int, Any]:
        """Send ``records`` ((key, value, timestamp), in order) to one partition at once;
        returns the futures of those at the indexes ``tracked``, and calls ``on_failure``
        when a batch of the others fails (kafka/batched_send.py)."""
        sent: dict[int, Any] = self._in_transaction_do(topic, append_records, self._producer, topic, partition,
                                                       records, tracked, on_failure)
        return sent

    def default_partition(self, topic: str, key: bytes) -> int | None:
        """The partition ``send`` picks for a keyed record without a partition, or None when
        only sending can tell (kafka/batched_send.py)."""
        return default_partition(self._producer, topic, key)

    @property
    def largest_batched_record(self) -> int:
        """Key plus value bytes up to which ``send_batch`` cannot refuse a record as too large."""
        return largest_unchecked_record(self._producer)

    def _in_transaction_do(self, topic: str, send: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``send(*args, **kwargs)``; under exactly-once inside the transaction (begun first
        if needed), a failure of the transaction raised as TransactionFailedError."""
        if self.transactional_id is None:
            return send(*args, **kwargs)
        from kafka.errors import KafkaError, KafkaTimeoutError

        try:
            if not self._in_transaction:
                self._producer.begin_transaction()
                self._in_transaction = True
            return send(*args, **kwargs)
        except KafkaError as exc:
            if is_record_error(exc) or isinstance(exc, KafkaTimeoutError):
                # refused before it was appended (too large; no metadata for the topic within
                # max_block_ms): the transaction is untouched, the caller decides
                raise
            # the transaction is in an error state (e.g. aborted by the coordinator after
            # transaction_timeout_ms, or fenced): nothing sent since the last commit counts
            self._abort_after_failure(exc)
            raise TransactionFailedError(f"transaction of {self.transactional_id} failed while sending to "
                                         f"{topic!r}: {exc!r}", migrated=is_fencing_error(exc)) from exc

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything sent is acknowledged, asking ``on_slow_flush`` every
        FLUSH_CHECK_SECONDS meanwhile. Exactly-once waits at most the transaction timeout:
        past it the coordinator aborts the transaction anyway, and kafka-python 3.0.12 keeps
        the records of a transaction it lost to an epoch bump queued until their delivery
        timeout (2 minutes) instead of failing them."""
        from kafka.errors import KafkaTimeoutError

        if timeout is None and self.transactional_id is not None:
            timeout = self._producer.config.get("transaction_timeout_ms", EOS_TRANSACTION_TIMEOUT_MS) / 1000
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = FLUSH_CHECK_SECONDS if deadline is None else min(FLUSH_CHECK_SECONDS,
                                                                     max(0.0, deadline - time.monotonic()))
            try:
                self._producer.flush(timeout=wait)
                return
            except KafkaTimeoutError as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    if self.transactional_id is None:
                        raise
                    self._abort_after_failure(exc)
                    raise TransactionFailedError(f"transaction of {self.transactional_id} aborted: its records "
                                                 f"were not acknowledged within {timeout:g} s") from exc
                if self._on_slow_flush is not None:
                    self._on_slow_flush(exc)

    def partitions_for(self, topic: str) -> Any:
        return self._producer.partitions_for(topic)

    # ------------------------------------------------------------------ transactions

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    def commit_transaction(self, offsets: Mapping[Any, Any], group_metadata: Any) -> None:
        """Commit what was sent since the last commit together with ``offsets`` (kafka-python
        TopicPartition -> OffsetAndMetadata). Raises TransactionFailedError after aborting."""
        from kafka.errors import (
            CommitFailedError,
            FencedInstanceIdError,
            IllegalGenerationError,
            KafkaError,
            ProducerFencedError,
            RebalanceInProgressError,
            UnknownMemberIdError,
        )

        if self.transactional_id is None:
            raise StreamsError("commit_transaction needs processing_guarantee 'exactly_once_v2'")
        if not offsets and not self._in_transaction:
            return
        if offsets and not is_group_member(group_metadata):
            self.abort_transaction()
            raise TransactionFailedError(
                f"transaction of {self.transactional_id} aborted: the consumer is no longer a member of its group "
                f"(generation {getattr(group_metadata, 'generation_id', None)}), so its tasks may run elsewhere "
                f"already", migrated=True)
        try:
            if not self._in_transaction:
                self._producer.begin_transaction()
                self._in_transaction = True
            if offsets:
                with self.waits.waiting_in("send_offsets_to_transaction", "the group coordinator") as update:
                    send_offsets_to_transaction_within(self._producer, dict(offsets), group_metadata,
                                                       self._call_timeout_ms, on_wait=update)
            with self.waits.waiting_in("commit_transaction", "the transaction coordinator") as update:
                commit_transaction_within(self._producer, self._call_timeout_ms, on_wait=update)
        except (ProducerFencedError, CommitFailedError, IllegalGenerationError, UnknownMemberIdError,
                FencedInstanceIdError, RebalanceInProgressError) as exc:
            self._abort_after_failure(exc)
            raise TransactionFailedError(f"transaction of {self.transactional_id} aborted: this member lost its "
                                         f"tasks ({type(exc).__name__}: {exc})", migrated=True) from exc
        except KafkaError as exc:
            self._abort_after_failure(exc)
            if exc.retriable:  # a broker could not answer: fail the thread past the task timeout
                self.waits.failed(f"the transaction of {self.transactional_id}", exc)
            raise TransactionFailedError(f"transaction of {self.transactional_id} aborted: {exc!r}") from exc
        self._in_transaction = False
        self.waits.succeeded()

    def abort_transaction(self) -> None:
        """Abort the open transaction, if any (errors are logged; the producer stays usable)."""
        if self._in_transaction:
            self._abort_after_failure(None)

    def _abort_after_failure(self, cause: BaseException | None) -> None:
        """Abort; when kafka-python refuses (a fatal transaction state: fenced, or an error
        it cannot abort from), replace the producer: the new one's init_transactions()
        aborts whatever the old one left open."""
        from kafka.errors import KafkaError

        self._in_transaction = False
        if cause is not None:
            log.warning("%s: aborting the transaction after %r", self.transactional_id, cause)
        try:
            timeout_ms = self._producer.config.get("transaction_timeout_ms", EOS_TRANSACTION_TIMEOUT_MS)
            if abort_transaction_within(self._producer, timeout_ms):
                return
            log.info("%s: the abort did not complete within the transaction timeout (records still waiting for "
                     "their partitions); replacing the producer", self.transactional_id)
        except KafkaError as exc:
            log.info("%s: abort refused (%r); replacing the producer", self.transactional_id, exc)
        _close_quietly(self._producer)
        self._producer = self._new_producer()

    def close(self, timeout: float = 10) -> None:
        """Close the producer; an open transaction is aborted first (a clean close commits
        before, so only what must not be kept is still open here)."""
        if self._in_transaction:
            try:
                self._abort_after_failure(None)
            except Exception:  # closing anyway: the coordinator aborts it on timeout
                log.info("%s: abort on close failed", self.transactional_id, exc_info=True)
        close_producer(self._producer, timeout)


def is_group_member(group_metadata: Any) -> bool:
    """Whether ``group_metadata`` (the consumer's ``group_metadata()``) names a member of a
    group generation. The group coordinator fences a transaction's offsets by that generation
    (KIP-447), but accepts transactional offsets without one (generation -1, no member id: the
    form exactly-once producers used before KIP-447) even while the group has members. A
    consumer the coordinator no longer knows reports exactly that (kafka-python 3.0.12 resets
    its generation when a heartbeat is answered UNKNOWN_MEMBER_ID, before the stream thread's
    next poll hears its partitions are lost): committing then would let a member whose tasks
    were given to another commit beside it, unfenced."""
    generation = getattr(group_metadata, "generation_id", -1)
    return isinstance(generation, int) and generation >= 0 and bool(getattr(group_metadata, "member_id", ""))


def is_fencing_error(exc: BaseException) -> bool:
    """Whether a producer error says another producer took over its transactional id, or the
    transaction coordinator aborted its transaction (timed out) and bumped its epoch: Kafka
    Streams turns both into TaskMigratedException."""
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError

    return isinstance(exc, (ProducerFencedError, InvalidProducerEpochError))


def is_record_error(exc: BaseException) -> bool:
    """Whether a send failed because of the record itself (too large, malformed, a timestamp
    the topic refuses): the production exception handler's business. Not missing topics,
    timeouts, authorization or fencing, which are no record's fault."""
    from kafka.errors import (
        CorruptRecordError,
        InvalidRecordError,
        InvalidTimestampError,
        MessageSizeTooLargeError,
        RecordListTooLargeError,
    )

    return isinstance(exc, (MessageSizeTooLargeError, RecordListTooLargeError, InvalidRecordError,
                            InvalidTimestampError, CorruptRecordError))


def _close_quietly(producer: Any) -> None:
    """Close a producer being discarded: its transaction failed or it never initialized, so
    nothing it still holds is worth sending (dropped first: close() would wait for it)."""
    discard_unsent_records(producer)
    close_producer(producer, 5)
