"""Prepared state for restoration tests and benchmarks: a key-value store's changelog
filled directly, much faster than processing input to build the same state.

The store is the ``counts`` store of ``tests.integration.topologies:configured_counts``
(string keys, int64 values): its changelog ``<application_id>-counts-changelog`` gets
``records`` records spread evenly over its partitions, every key distinct, so a task
restoring partition p replays exactly the records of partition p.
"""

from __future__ import annotations

from typing import Any

from airflow_stateful_provider.streams.topology.store_builders import changelog_topic_name

COUNTS_STORE = "counts"


def fill_counts_changelog(bootstrap_servers: str, application_id: str, partitions: int, records: int, *,
                          batch_bytes: int = 1 << 20) -> dict[int, int]:
    """Create the changelog (compacted, ``partitions`` partitions) and write ``records``
    records in producer batches of up to ``batch_bytes`` (small ones let a restore consumer
    with a small ``max_partition_fetch_bytes`` fetch a few at a time); returns the end offset
    of every partition."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    topic = changelog_topic_name(application_id, COUNTS_STORE)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks=1, linger_ms=50, batch_size=batch_bytes)
    one = (1).to_bytes(8, "big")
    try:
        for i in range(records):
            producer.send(topic, key=b"key-%d" % i, value=one, partition=i % partitions)
        producer.flush()
    finally:
        producer.close()
    consumer: Any = KafkaConsumer(bootstrap_servers=bootstrap_servers)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    finally:
        consumer.close()
    return {tp.partition: offset for tp, offset in ends.items()}
