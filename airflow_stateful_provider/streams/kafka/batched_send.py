"""Many records for one partition appended to a KafkaProducer at once.

``KafkaProducer.send`` does per record what is the same for a whole run of records to one
partition: checks of the producer and the topic's metadata, the transaction's partition
bookkeeping, a lock and a lookup of the open batch, a debug log call, a sender wakeup.
A record cache flush sends thousands of changelog and output records to a handful of
partitions (under exactly-once at 100 ms commits that flush is most of the engine's work),
so ``append_records`` does that work once per partition and appends each record straight
into the open producer batch, as ``send`` would. ``default_partition`` picks the partition
``send`` would pick for a keyed record, so output records can be grouped by partition first.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["append_records", "default_partition", "largest_unchecked_record"]

_NO_HEADERS: list = []
#: More than the bytes a record without headers adds to its batch besides key and value
#: (kafka-python's v2 estimate: the batch header, 61, and the record's varints and
#: attributes, at most 32): a smaller record cannot exceed ``max_request_size``.
_RECORD_OVERHEAD = 128


def append_records(producer: Any, topic: str, partition: int,
                   records: Sequence[tuple[bytes | None, bytes | None, int]]) -> tuple[list, list[int]]:
    """Append ``records`` ((key, value, timestamp ms), in order, no headers) to ``topic``'s
    ``partition``, exactly as ``producer.send(topic, value=, key=, partition=,
    timestamp_ms=)`` one after the other would. Returns the records' futures (in order) and
    the indexes of the last record of each producer batch they went into: when a batch
    fails, every record of it fails, so an errback on these futures sees every failure.
    Raises what ``send`` raises before appending anything: a closed producer, no metadata for
    the topic within ``max_block_ms``, a transaction in an error state, a record larger than
    ``max_request_size``.

    Checked against kafka-python 3.0.12: ``KafkaProducer.send`` (metadata wait, size check,
    ``TransactionManager.maybe_add_partition_to_transaction``, ``RecordAccumulator.append``,
    sender wakeup when a batch is full or new) and ``ProducerBatch.try_append`` (one
    ``FutureRecordMetadata`` per record in ``_record_futures``, whose index is the record's:
    splitting a batch the broker found too large rebinds them by index).
    """
    from kafka.errors import IllegalStateError
    from kafka.producer.future import FutureRecordMetadata
    from kafka.structs import TopicPartition

    if producer._closed:
        raise IllegalStateError("KafkaProducer already closed!")
    if not records:
        return [], []
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
    futures: list = []
    batch_ends: list[int] = []
    wake = False
    i, n = 0, len(records)
    accumulator._appends_in_progress.increment()
    try:
        while i < n:
            # a record that finds no open batch with room takes send()'s own path (a new batch)
            key, value, timestamp = records[i]
            future, full, new_batch, _ = accumulator.append(tp, timestamp, key, value, _NO_HEADERS, now=now)
            futures.append(future)
            wake = wake or full or new_batch
            i += 1
            with accumulator._tp_lock(tp):
                queue = accumulator._batches[tp]
                if not queue or queue[-1].produce_future is not future._produce_future:
                    batch_ends.append(i - 1)  # the sender took the batch meanwhile: the next record opens one
                    continue
                batch = queue[-1]
                append, batch_records = batch.records.append, batch._record_futures
                produced, largest = batch.produce_future, batch.max_record_size
                while i < n:
                    key, value, timestamp = records[i]
                    metadata = append(timestamp, key, value, _NO_HEADERS)
                    if metadata is None:  # full: the next record starts a new batch
                        break
                    if metadata.size > largest:
                        largest = metadata.size
                    future = FutureRecordMetadata(produced, metadata.offset, metadata.timestamp, metadata.crc,
                                                  -1 if key is None else len(key),
                                                  -1 if value is None else len(value), -1)
                    batch_records.append(future)
                    futures.append(future)
                    i += 1
                batch_ends.append(i - 1)
                batch.max_record_size = largest
                batch.last_append = now
                wake = wake or len(queue) > 1 or batch.records.is_full()
    finally:
        accumulator._appends_in_progress.decrement()
    if wake:
        producer._sender.wakeup()
    return futures, batch_ends


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
