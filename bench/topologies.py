"""Topologies the HA benchmarks run in instance processes
(``python -m airflow_stateful_provider.streams.runner --topology bench.topologies:NAME``).

The output value says who processed the record and when, so a benchmark can tell the
first record a task's new owner processed after a failover from records replayed or
delivered late: the timestamp is taken in the processor, not when the output arrives.
"""

from __future__ import annotations

import time

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.processor import Processor
from airflow_stateful_provider.streams.topology.store_builders import Stores
from airflow_stateful_provider.streams.topology.topology import Topology
from tools.kafka.topics import produce, read_committed_offsets

#: Name of the key-value store (changelog ``<application_id>-counts-changelog``).
STORE = "counts"


def marked_counts(config: StreamsConfig) -> Topology:
    """Values counted per key into a persistent key-value store; every new count goes to
    ``app_configs["output"]`` as JSON ``{"n": count, "by": instance_id, "task": "0_1",
    "at": wall-clock ms when processed}``. Topics from ``app_configs`` ("input", "output")."""
    instance_id = config.instance_id or "?"

    class MarkedCount(Processor):
        def init(self, context):
            self.context = context
            self.counts = context.get_state_store(STORE)
            self.task = str(context.task_id)

        def process(self, record):
            count = (self.counts.get(record.key) or 0) + 1
            self.counts.put(record.key, count)
            self.context.forward(record.with_value(
                {"n": count, "by": instance_id, "task": self.task, "at": time.time_ns() // 1_000_000}))

    topology = Topology()
    topology.add_source("source", config.app_configs["input"], key_serde="string", value_serde="bytes")
    topology.add_processor("count", MarkedCount, "source")
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store(STORE), "string", "int64")
    topology.add_state_store(store, "count")
    topology.add_sink("sink", config.app_configs["output"], "count", key_serde="string", value_serde="json")
    return topology


# ---------------------------------------------------------------------------- shared by the benchmarks

import os  # noqa: E402
import threading  # noqa: E402


class SteadyProducer(threading.Thread):
    """Sends records at ``per_second`` until stopped, keys cycling over ``keys`` existing
    keys (so the state does not grow, only its changelog)."""

    def __init__(self, bootstrap_servers: str, topic: str, per_second: int, keys: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap_servers, self.topic, self.per_second, self.keys = bootstrap_servers, topic, per_second, keys
        self.sent = 0
        self._stopped = threading.Event()

    def run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, linger_ms=5)
        started = time.monotonic()
        step = max(1, self.per_second // 20)  # 20 small bursts a second
        while not self._stopped.is_set():
            for _ in range(step):
                producer.send(self.topic, key=record_key((self.sent * 7919) % self.keys), value=b"s")
                self.sent += 1
            producer.flush()
            self._stopped.wait(max(0.0, started + self.sent / self.per_second - time.monotonic()))
        producer.flush()
        producer.close()

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=30)


def record_key(i: int) -> bytes:
    return b"key-%08d" % i


def produce_keys(bootstrap_servers: str, topic: str, records: int, keys: int) -> None:
    """``records`` records over ``keys`` keys (each key ``records // keys`` times, interleaved)."""
    produce(bootstrap_servers, topic, ((record_key(i % keys), b"p") for i in range(records)), linger_ms=50,
            batch_size=1024 * 1024, acks=1)


class OffsetReader:
    """Committed offsets of a group and end offsets of a topic, with one long-lived admin
    client and consumer (sampling every 100 ms must not open connections each time)."""

    def __init__(self, bootstrap_servers: str) -> None:
        from kafka import KafkaAdminClient, KafkaConsumer

        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        return read_committed_offsets(self.admin, group, topic)

    def ends(self, topic: str) -> dict[int, int]:
        from kafka import TopicPartition

        tps = [TopicPartition(topic, p) for p in sorted(self.consumer.partitions_for_topic(topic))]
        return {tp.partition: offset for tp, offset in self.consumer.end_offsets(tps).items()}

    def close(self) -> None:
        self.admin.close()
        self.consumer.close()


def machine() -> str:
    import platform

    return f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"
