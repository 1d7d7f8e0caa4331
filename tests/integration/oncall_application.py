"""The application on-call looks at in the Airflow services tests: two real KafkaStreams
instances in the test process, counting JSON records per key into a ``counts`` store
(as tests/integration/topologies.py ``json_counts``), exactly-once, one standby per task,
snapshots on a local directory, and a prefilled ``counts`` changelog, so that both tasks
restore when the instances start.

Two paces are set on purpose, so that what on-call watches lasts long enough to be seen
however fast the machine: the instances' restore and standby listeners hold the stream
thread for ``RESTORE_SECONDS_PER_RECORD`` per changelog record applied (after applying it:
the status documents show the real progress), and the counting processor sleeps
``Pace.seconds_per_record`` per record while a test sets it (input lag builds up, then
drains).

Also: a scrape of the metrics endpoint, parsed with prometheus_client's OpenMetrics parser.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from pathlib import Path
from typing import Any

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from airflow_stateful_provider.streams import KafkaStreams, Processor, Stores, StreamsConfig, Topology
from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreamsState
from tools.changelog_state import COUNTS_STORE, fill_counts_changelog
from tools.kafka.topics import create_topics

PARTITIONS = 2
#: Changelog records per partition; restoring one takes at least RECORDS * RESTORE_SECONDS_PER_RECORD.
RECORDS_PER_PARTITION = 8_000
RESTORE_SECONDS_PER_RECORD = 0.0015
#: Size of the changelog's producer batches and of a partition's fetch: a restoring task
#: applies about a hundred records per batch, so its progress advances in small steps.
FETCH_BYTES = 4096


class Pace:
    """Seconds the counting processor sleeps per record (0: full speed)."""

    seconds_per_record = 0.0


def paced_counts(input_topic: str, output_topic: str) -> Topology:
    class Count(Processor):
        def init(self, context: Any) -> None:
            self.context = context
            self.counts = context.get_state_store(COUNTS_STORE)

        def process(self, record: Any) -> None:
            if Pace.seconds_per_record:
                time.sleep(Pace.seconds_per_record)
            count = (self.counts.get(record.key) or 0) + 1
            self.counts.put(record.key, count)
            self.context.forward(record.with_value(count))

    topology = Topology()
    topology.add_source("source", input_topic, key_serde="string", value_serde="json")
    topology.add_processor("count", Count, "source")
    topology.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store(COUNTS_STORE), "string",
                                                            "int64"), "count")
    topology.add_sink("sink", output_topic, "count", key_serde="string", value_serde="int64")
    return topology


class _Throttle:
    """Restore and standby listener that sleeps in proportion to the records applied."""

    def on_batch_restored(self, partition: Any, store_name: str, batch_end_offset: int, num_restored: int) -> None:
        time.sleep(num_restored * RESTORE_SECONDS_PER_RECORD)

    def on_batch_loaded(self, partition: Any, store_name: str, task_id: Any, batch_end_offset: int, batch_size: int,
                        current_end_offset: int | None) -> None:
        time.sleep(batch_size * RESTORE_SECONDS_PER_RECORD)

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None  # the other callbacks of both listener protocols


@dataclasses.dataclass
class OncallApplication:
    application_id: str
    input_topic: str
    output_topic: str
    instances: list[KafkaStreams]

    def start(self) -> None:
        """Start the instances (once): their tasks restore the prefilled changelog."""
        for instance in self.instances:
            if instance.state is KafkaStreamsState.CREATED:
                instance.start()

    def running(self) -> bool:
        return all(i.state is KafkaStreamsState.RUNNING for i in self.instances)

    def close(self) -> None:
        for instance in self.instances:
            instance.close(timeout=60)


def prepare_application(bootstrap_servers: str, work_dir: Path) -> OncallApplication:
    """The topics, the prefilled changelog and the instances, not started yet (``start()``),
    so that a test can be watching before the restoration begins."""
    app_id = f"oncall-{uuid.uuid4().hex[:6]}"
    input_topic, output_topic = f"{app_id}-in", f"{app_id}-out"
    create_topics(bootstrap_servers, {input_topic: PARTITIONS, output_topic: PARTITIONS})
    fill_counts_changelog(bootstrap_servers, app_id, PARTITIONS, PARTITIONS * RECORDS_PER_PARTITION,
                          batch_bytes=FETCH_BYTES)
    instances = []
    for n in range(2):
        config = StreamsConfig.from_mapping({
            "application_id": app_id, "bootstrap_servers": bootstrap_servers, "instance_id": f"{app_id}-{n}",
            "state_dir": str(work_dir / f"state-{n}"), "processing_guarantee": "exactly_once_v2",
            "num_standby_replicas": 1, "status_interval_ms": 500,
            "deserialization_exception_handler": "log_and_continue",
            "snapshot_url": (work_dir / "snapshots").as_uri(), "snapshot_interval_ms": 1_000,
            "consumer_configs": {"session_timeout_ms": 10_000,
                                 "max_partition_fetch_bytes": FETCH_BYTES}})
        streams = KafkaStreams(paced_counts(input_topic, output_topic), config)
        streams.set_global_state_restore_listener(_Throttle())
        streams.set_standby_update_listener(_Throttle())
        instances.append(streams)
    return OncallApplication(app_id, input_topic, output_topic, instances)


def json_records(count: int, *, start: int = 0, keys: int = 50) -> list[tuple[str, str]]:
    return [(f"key-{i % keys}", json.dumps({"n": i})) for i in range(start, start + count)]


@dataclasses.dataclass(frozen=True)
class Scrape:
    """One scrape: ``(sample name, frozenset of labels) -> value``."""

    samples: dict[tuple[str, frozenset], float]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        return cls({(s.name, frozenset(s.labels.items())): s.value
                    for family in text_string_to_metric_families(text) for s in family.samples})

    def values(self, name: str, **labels: str) -> list[float]:
        """Values of ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return [v for (n, ls), v in self.samples.items() if n == name and wanted <= ls]

    def value(self, name: str, **labels: str) -> float:
        found = self.values(name, **labels)
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples ({found})"
        return found[0]
