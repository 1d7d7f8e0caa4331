"""Small Kafka helpers for the tests; instance processes and ``wait_until`` are in tools/instances.py."""

from __future__ import annotations

import time

from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from tools.instances import committed_offsets as read_committed_offsets


def create_topics(bootstrap_servers: str, partitions: dict[str, int], configs: dict[str, dict] | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.create_topics([NewTopic(name, count, 1, topic_configs=(configs or {}).get(name, {}))
                             for name, count in partitions.items()])
    finally:
        admin.close()


def end_offsets(bootstrap_servers: str, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers)
    try:
        partitions = consumer.partitions_for_topic(topic)
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        consumer.close()


def committed_offsets(bootstrap_servers: str, group: str, topic: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        return read_committed_offsets(admin, group, topic)
    finally:
        admin.close()


def read_all(bootstrap_servers: str, topic: str) -> list[Any]:
    """Every committed record of ``topic`` (records of aborted transactions left out), in
    partition then offset order."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                             isolation_level="read_committed")
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records: list[Any] = []
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end offsets {ends}")
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()
