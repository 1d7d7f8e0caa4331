"""Many records for one partition appended to a KafkaProducer at once.

``KafkaProducer.send`` does per record what is the same for a whole run of records to one
partition: checks of the producer and the topic's metadata, the transaction's partition
bookkeeping, a lock and a lookup of the open batch, a debug log call, a sender wakeup.
A record cache flush sends thousands of changelog and output records to a handful of
partitions (under exactly-once at 100 ms commits that flush is most of the engine's work),
so ``append_records`` does that work once per partition and writes the records straight
into the open producer batch (kafka/batch_encoding.py), with a future only for the records
the caller asks about (a sink record's, the last changelog record's) and one watch per
batch for the others. ``default_partition`` picks the partition
``send`` would pick for a keyed record, so output records can be grouped by partition first.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from airflow_stateful_provider.streams.kafka.batch_encoding import append_to_batch

__all__ = ["append_records", "default_partition", "largest_unchecked_record"]

_NO_HEADERS: list = []
#: Past every index of a call's records: no tracked record left.
_NOT_AN_INDEX = 1 << 62
#: More than the bytes a record without headers adds to its batch besides key and value
#: (kafka-python's v2 estimate: the batch header, 61, and the record's varints and
#: attributes, at most 32): a smaller record cannot exceed ``max_request_size``.
_RECORD_OVERHEAD = 128


def append_records(producer: Any, topic: str, partition: int,
                   records: Sequence[tuple[bytes | None, bytes | None, int]], tracked: Iterable[int],
                   on_failure: Callable[[Exception], None]) -> dict[int, Any]:
    """Append ``records`` ((key, value, timestamp ms), in order, no headers) to ``topic``'s
    ``partition``, exactly as ``producer.send(topic, value=, key=, partition=,
    timestamp_ms=)`` one after the other would. Returns the futures of the records at the
    indexes ``tracked`` (ascending). The others get no future of their own (building and
    completing one per record cost more than encoding it): when a producer batch holding
    any of them fails, ``on_failure(exception)`` is called on the producer's I/O thread,
    also when the producer had split that batch. Raises what ``send`` raises before
    appending anything: a closed producer, no metadata for the topic within
    ``max_block_ms``, a transaction in an error state, a record larger than
    ``max_request_size``.

    Checked against kafka-python 3.0.12: ``KafkaProducer.send`` (metadata wait, size check,
    ``TransactionManager.maybe_add_partition_to_transaction``, ``RecordAccumulator.append``,
    sender wakeup when a batch is full or new), ``ProducerBatch.try_append`` (one entry per
    record in ``_record_futures``, at the record's index) and
    ``RecordAccumulator.split_and_reenqueue`` (a batch the broker found too large is split in
    new batches, each entry of ``_record_futures`` rebound to the new batch of its record).
    """
    from kafka.errors import IllegalStateError
    from kafka.producer.future import FutureRecordMetadata
    from kafka.structs import TopicPartition

    if producer._closed:
        raise IllegalStateError("KafkaProducer already closed!")
    if not records:
        return {}
    partitions = producer._metadata.partitions_for_topic(topic)
    if partitions is None:
        partitions = producer._wait_on_metadata(topic, producer.config["max_block_ms"])
    if partition not in partitions:
        raise ValueError(f"Unrecognized partition {partition} for topic {topic}")
    limit = largest_unchecked_record(producer)
    for key, value, _ in records:
        if (len(key) if key else 0) + (len(value) if value else 0) > limit:
            producer._ensure_valid_record_size(producer._estimate_size_in_bytes(key, value, _NO_HEADERS))
    tp = TopicPartition(topic, partition)
    transactions = producer._transaction_manager
    if transactions is not None and transactions.is_transactional():
        transactions.maybe_add_partition_to_transaction(tp)
    accumulator = producer._accumulator
    now = time.monotonic()
    futures: dict[int, Any] = {}
    untracked = _UntrackedRecords(on_failure)
    pending = iter(tracked)
    next_tracked = next(pending, _NOT_AN_INDEX)
    wake = False
    i, n = 0, len(records)
    accumulator._appends_in_progress.increment()
    try:
        while i < n:
            # a record that finds no open batch with room takes send()'s own path (a new batch)
            key, value, timestamp = records[i]
            future, full, new_batch, _ = accumulator.append(tp, timestamp, key, value, _NO_HEADERS, now=now)
            if i == next_tracked:
                futures[i] = future
                next_tracked = next(pending, _NOT_AN_INDEX)
            else:
                future.add_errback(on_failure)
            wake = wake or full or new_batch
            i += 1
            with accumulator._tp_lock(tp):
                queue = accumulator._batches[tp]
                if not queue or queue[-1].produce_future is not future._produce_future:
                    continue  # the sender took the batch meanwhile: the next record opens one
                batch = queue[-1]
                memory_records, entries, produced = batch.records, batch._record_futures, batch.produce_future
                largest = batch.max_record_size
                first_untracked = -1  # the batch index of this call's first untracked record in it
                while i < n:
                    # a run of untracked records written at once, or a tracked record alone
                    is_tracked = i == next_tracked
                    appended, size = append_to_batch(memory_records, records, i,
                                                     i + 1 if is_tracked else min(next_tracked, n))
                    key, value, timestamp = records[i]
                    crc = None  # magic 2 records have none
                    if not appended:
                        # the batch is full, or the record is of a shape (or the batch of a
                        # message format) kafka-python's append checks
                        metadata = memory_records.append(timestamp, key, value, _NO_HEADERS)
                        if metadata is None:  # full: the next record starts a new batch
                            break
                        appended, size, timestamp, crc = 1, metadata.size, metadata.timestamp, metadata.crc
                    largest = max(largest, size)
                    first = memory_records.next_offset() - appended  # the batch index of the first one
                    if is_tracked:
                        future = FutureRecordMetadata(produced, first, timestamp, crc, -1 if key is None else len(key),
                                                      -1 if value is None else len(value), -1)
                        entries.append(future)
                        futures[i] = future
                        next_tracked = next(pending, _NOT_AN_INDEX)
                    else:
                        if first_untracked < 0:
                            first_untracked = first
                        entries.extend([untracked] * appended)
                    i += appended
                if first_untracked >= 0:
                    untracked.rebind(produced, first_untracked)
                batch.max_record_size = largest
                batch.last_append = now
                wake = wake or len(queue) > 1 or memory_records.is_full()
    finally:
        accumulator._appends_in_progress.decrement()
    if wake:
        producer._sender.wakeup()
    return futures


class _UntrackedRecords:
    """The entry of ``ProducerBatch._record_futures`` of every record of one
    :func:`append_records` call that has no future of its own. It watches each batch it is in
    and calls ``on_failure`` when one fails; kafka-python calls :meth:`rebind` for each of
    its entries when it splits a batch, so it then watches the new batches too."""

    __slots__ = ("_on_failure", "_watched")

    def __init__(self, on_failure: Callable[[Exception], None]) -> None:
        self._on_failure = on_failure
        self._watched: list[Any] = []  # the produce futures watched (a handful per call)

    def rebind(self, produce_future: Any, batch_index: int) -> None:
        """Watch ``produce_future`` (once), the batch's result seen through the record at
        ``batch_index``. A failed batch completes its produce future with a function giving
        each record's error (``ProducerBatch.done``)."""
        if any(watched is produce_future for watched in self._watched):
            return
        self._watched.append(produce_future)
        produce_future.add_callback(self._completed, batch_index)
        produce_future.add_errback(self._on_failure)

    def _completed(self, batch_index: int, result: tuple[int, int, Callable[[int], Exception] | None]) -> None:
        record_exceptions = result[2]
        if record_exceptions is not None:
            self._on_failure(record_exceptions(batch_index))


def largest_unchecked_record(producer: Any) -> int:
    """Key plus value bytes up to which a record without headers cannot exceed the
    producer's ``max_request_size`` (checked against kafka-python 3.0.12's estimate)."""
    return int(producer.config["max_request_size"]) - _RECORD_OVERHEAD


@functools.lru_cache(maxsize=1 << 16)
def _key_hash(key: bytes) -> int:
    """What kafka-python 3.0.12's ``DefaultPartitioner`` hashes a key to: its murmur2 is pure
    Python (several microseconds a key), and output keys repeat."""
    from kafka.partitioner.default import murmur2

    return murmur2(key) & 0x7fffffff


def default_partition(producer: Any, topic: str, key: bytes) -> int | None:
    """The partition ``producer.send(topic, key=key)`` would pick, or None when this cannot
    tell without sending (a partitioner of the user's, no metadata for the topic yet).

    Checked against kafka-python 3.0.12: ``DefaultPartitioner`` picks, of the topic's
    partitions sorted, the one at ``murmur2(key) & 0x7fffffff`` modulo their number, as
    Kafka's Java producer does for keyed records.
    """
    from kafka.partitioner.default import DefaultPartitioner

    if type(producer.config["partitioner"]) is not DefaultPartitioner:
        return None
    partitions = producer._metadata.partitions_for_topic(topic)
    if not partitions:
        return None
    return sorted(partitions)[_key_hash(key) % len(partitions)]
