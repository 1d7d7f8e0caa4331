"""A store kind added as one folder (tests/counter_kind/) on a real broker: instance processes
count with it, log every total to its changelog, and a new instance with an empty state
directory restores it from that changelog and counts on from the restored totals. The
instance processes know the kind only through the topology module that imports it."""

from __future__ import annotations

import os
import uuid

import pytest
from kafka import KafkaProducer

from airflow_stateful_provider.streams import open_store
from tests.counter_kind.stores import TOTAL, RocksDBCounterStore
from tools.instances import InstanceProcess
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, read_all
from tools.waits import wait_for_commits

pytestmark = pytest.mark.kafka

PARTITIONS = 2
KEYS = 6
TOPOLOGY = "tests.integration.topologies:counter_kind_counts"


def produce(bootstrap_servers: str, topic: str, start: int, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=20)
    for i in range(start, start + count):
        producer.send(topic, key=f"user-{i % KEYS}".encode(), value=b"click")
    producer.flush()
    producer.close()


def last_per_key(bootstrap_servers: str, topic: str) -> dict[str, int]:
    return {r.key.decode(): int.from_bytes(r.value, "big", signed=True) for r in read_all(bootstrap_servers, topic)}


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_an_instance_counts_with_it_and_a_new_one_restores_it_from_its_changelog(bootstrap_servers, tmp_path,
                                                                                  guarantee):
    app = f"counter-kind-{uuid.uuid4().hex[:8]}"
    source, sink, changelog = f"{app}-in", f"{app}-out", f"{app}-counts-changelog"
    create_topics(bootstrap_servers, {source: PARTITIONS, sink: PARTITIONS})

    def config(state_dir: str) -> dict:
        return {"application_id": app, "bootstrap_servers": bootstrap_servers, "state_dir": state_dir,
                "processing_guarantee": guarantee, "commit_interval_ms": 200,
                "app_configs": {"input": source, "output": sink}}

    def committed() -> dict[int, int]:
        return committed_offsets(bootstrap_servers, app, source)

    produce(bootstrap_servers, source, 0, 600)
    first = InstanceProcess(TOPOLOGY, config(str(tmp_path / "first")), tmp_path, "first").start()
    try:
        wait_for_commits(committed, 600, "600 records committed", [first])
        assert first.stop() == 0, first.log_tail()
    finally:
        first.ensure_stopped()

    # Every total went to the changelog, and the RocksDB stores hold the last ones.
    assert sum(end_offsets(bootstrap_servers, changelog).values()) >= 600
    logged = {r.key.decode(): TOTAL.unpack(r.value)[0] for r in read_all(bootstrap_servers, changelog)}
    assert logged == {f"user-{k}": 100 for k in range(KEYS)}
    on_disk = {}
    for partition in range(PARTITIONS):
        with open_store(os.path.join(tmp_path, "first", app, f"0_{partition}", "counts"), read_only=True) as store:
            assert isinstance(store, RocksDBCounterStore)
            on_disk.update({k.decode(): total for k, total in store.all()})
    assert on_disk == {f"user-{k}": 100 for k in range(KEYS)}

    produce(bootstrap_servers, source, 600, 60)
    second = InstanceProcess(TOPOLOGY, config(str(tmp_path / "second")), tmp_path, "second").start()
    try:
        wait_for_commits(committed, 660, "660 records committed", [second])
        restored = second.restored_records()
        assert second.stop() == 0, second.log_tail()
    finally:
        second.ensure_stopped()
    assert restored == 600  # the whole changelog of the first instance, one record per input record
    assert last_per_key(bootstrap_servers, sink) == {f"user-{k}": 110 for k in range(KEYS)}
