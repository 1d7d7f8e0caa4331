"""Topics on a broker, as tests, benchmarks and the demo handle them: creating them, producing
records, reading them back, their end and committed offsets. The one place for each; waiting
is in tools/waits.py."""

from __future__ import annotations

import atexit
import json
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError

from airflow_stateful_provider.streams.kafka.response_classes import install_response_classes_kept
from tools.waits import wait_progressing

# Clients of the tests and benchmarks run in threads beside the engine's: the same kafka-python fix.
install_response_classes_kept()

#: How long a read_committed read waits for the transactions written before it to complete.
TRANSACTIONS_SETTLE_SECONDS = 30.0


def create_topics(bootstrap_servers: str, partitions: dict[str, int], configs: dict[str, dict] | None = None,
                  replication_factor: int = 1) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.create_topics([NewTopic(name, count, replication_factor, topic_configs=(configs or {}).get(name, {}))
                             for name, count in partitions.items()])
    finally:
        admin.close()


def delete_topics(bootstrap_servers: str, topics: Iterable[str]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.delete_topics(list(topics))
    finally:
        admin.close()


def _bytes(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def produce(bootstrap_servers: str, topic: str, records: Iterable[tuple[Any, ...]], *, partition: int | None = None,
            **producer_configs: Any) -> int:
    """Send ``records`` to ``topic`` and return how many once the broker has every one of them.

    A record is ``(key, value)`` or ``(key, value, timestamp_ms)``; a str key or value is sent
    UTF-8 encoded, None as null. ``partition`` puts every record there (default: Kafka's
    partitioner, by key); ``producer_configs`` go to kafka-python's KafkaProducer (``linger_ms``,
    ``batch_size``, ...). A record the broker refused raises AssertionError naming it.
    """
    failed: list[tuple[Any, Exception]] = []

    def note_failure(key: Any, error: Exception) -> None:
        failed.append((key, error))

    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, **producer_configs)
    try:
        sent = 0
        for record in records:
            key, value, timestamp_ms = (*record, None) if len(record) == 2 else record
            producer.send(topic, key=_bytes(key), value=_bytes(value), partition=partition,
                          timestamp_ms=timestamp_ms).add_errback(note_failure, key)
            sent += 1
        producer.flush()
    finally:
        producer.close()
    if failed:
        key, error = failed[0]
        raise AssertionError(f"{len(failed)} of {sent} records were not written to {topic}, e.g. the one with key "
                             f"{key!r}: {error!r}")
    return sent


def numbered_records(start: int, count: int, keys: int, *, key_digits: int = 0) -> Iterator[tuple[str, str]]:
    """Records n = ``start`` .. ``start + count - 1``, keyed ``k<n % keys>`` (zero-padded to
    ``key_digits``), valued ``{"n": n}``: the input of the tests' counting topologies."""
    for n in range(start, start + count):
        yield f"k{n % keys:0{key_digits}d}", json.dumps({"n": n})


def end_offsets(bootstrap_servers: str, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers)
    try:
        partitions = consumer.partitions_for_topic(topic)
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        consumer.close()


def read_committed_offsets(admin: Any, group: str, topic: str) -> dict[int, int]:
    """The offsets ``group`` committed for ``topic``, by partition, read with a kafka-python
    admin client; empty while the group coordinator is still being set up."""
    try:
        offsets = admin.list_group_offsets({group: None}).get(group, {})
    except KafkaError as exc:
        if not exc.retriable:
            raise
        return {}
    return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic and om.offset >= 0}


def topic_configs(bootstrap_servers: str, topic: str) -> dict[str, str | None]:
    """Every config of ``topic`` as the broker resolves it (its own, the broker's defaults)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    finally:
        admin.close()
    return {key: entry.get("value") for key, entry in described["topic"][topic].items()}


#: committed_offsets' admin clients that answered, by bootstrap address (see there)
_kept_admins: dict[str, KafkaAdminClient] = {}
_kept_admins_lock = threading.Lock()


def committed_offsets(bootstrap_servers: str, group: str, topic: str) -> dict[int, int]:
    """:func:`read_committed_offsets` through an admin client kept per bootstrap address: waits
    ask twice a second, and a new client per question cost the broker and this process about
    30 ms of CPU. A client that fails or gets no offsets is closed, not kept (kafka-python's
    admin caches a group's coordinator for good: after the coordinator moved it would never
    answer again). A caller takes the client out while it asks, so callers in other threads
    never share one."""
    with _kept_admins_lock:
        admin = _kept_admins.pop(bootstrap_servers, None)
    if admin is None:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    offsets: dict[int, int] = {}
    try:
        offsets = read_committed_offsets(admin, group, topic)
        return offsets
    finally:
        with _kept_admins_lock:
            kept = bool(offsets) and bootstrap_servers not in _kept_admins
            if kept:
                _kept_admins[bootstrap_servers] = admin
        if not kept:
            admin.close()


@atexit.register
def close_kept_admins(bootstrap_servers: str | None = None) -> None:
    """Close the admin clients committed_offsets keeps that bootstrap from any of the
    ``bootstrap_servers`` (all: None). The local broker and cluster call it as they stop, so
    no client outlives its broker trying to reconnect."""
    stopping = None if bootstrap_servers is None else set(bootstrap_servers.split(","))
    with _kept_admins_lock:
        addresses = [address for address in _kept_admins
                     if stopping is None or stopping & set(address.split(","))]
        admins = [_kept_admins.pop(address) for address in addresses]
    for admin in admins:
        admin.close()


def _stable_end_offsets(consumer: KafkaConsumer, bootstrap_servers: str, topic: str, tps: list[TopicPartition]
                        ) -> dict[TopicPartition, int]:
    """A read_committed consumer's end offsets (the last stable offsets) once they reach the
    offsets written before now. ``commit_transaction`` returns before the coordinator has
    written the transaction's markers, and until they land the last stable offset stays at
    the transaction's first record: a read right after a commit would miss it (one time in
    two on a local broker). A transaction still open after TRANSACTIONS_SETTLE_SECONDS (its
    producer gone) is not waited for further: what is stable then is the end."""
    written = end_offsets(bootstrap_servers, topic)
    deadline = time.monotonic() + TRANSACTIONS_SETTLE_SECONDS
    while True:
        stable = consumer.end_offsets(tps)
        if all(stable[tp] >= written[tp.partition] for tp in tps) or time.monotonic() > deadline:
            return stable
        time.sleep(0.05)


def read_all(bootstrap_servers: str, topic: str, isolation_level: str = "read_committed") -> list[Any]:
    """Every committed record of ``topic`` (records of aborted transactions left out; every
    record with ``isolation_level="read_uncommitted"``), in partition then offset order; a
    read_committed read includes the transactions committed before it began (see
    _stable_end_offsets). Fails when the read stops moving for a minute short of the end
    offsets."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                             isolation_level=isolation_level)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = _stable_end_offsets(consumer, bootstrap_servers, topic, tps) if isolation_level == "read_committed" \
            else consumer.end_offsets(tps)
        records: list[Any] = []

        def positions() -> dict[int, int]:
            return {tp.partition: consumer.position(tp) for tp in tps}

        def at_end() -> bool:
            if all(consumer.position(tp) >= ends[tp] for tp in tps):
                return True
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
            return False

        wait_progressing(at_end, lambda: sum(positions().values()), f"{topic} read to its end offsets",
                         measure="positions", context=lambda: f"positions {positions()}, end offsets "
                                                              f"{ {tp.partition: o for tp, o in ends.items()} }",
                         interval=0)
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()
