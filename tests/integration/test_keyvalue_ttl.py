"""Key-value TTL on the real broker (exactly-once, one standby): StoreRetentionOperator online
expires the keys of a stalled table (their last update three hours ago, TTL one hour): a
tombstone downstream for each, a changelog tombstone each plus the cut-off row; a new
instance on an empty disk restores an empty table and drops a late update as expired, while
a fresh one is kept."""

from __future__ import annotations

import json
import os
import time

import pytest

from airflow_stateful_provider.operators.maintenance import StoreRetentionOperator
from airflow_stateful_provider.streams.state.keyvalue.ttl import TTL_CLOCK_KEY, TTL_CUTOFF_KEY
from airflow_stateful_provider.streams.state.store_dir import open_store
from tests.integration.test_control_topic import PARTITIONS, Cluster
from tools.kafka.topics import committed_offsets, end_offsets, produce, read_all
from tools.waits import wait_for_commits

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]

TOPOLOGY = "tests.integration.topologies:ttl_profiles"
HOUR = 3_600_000
KEYS = [f"k{i}" for i in range(6)]
RESERVED = (TTL_CUTOFF_KEY, TTL_CLOCK_KEY)


def wait_committed(cluster: Cluster) -> None:
    ends = end_offsets(cluster.bootstrap_servers, cluster.input)
    wait_for_commits(lambda: committed_offsets(cluster.bootstrap_servers, cluster.app, cluster.input), ends,
                     "every update committed", context=cluster.logs)


def table_rows(cluster: Cluster, name: str) -> dict[str, list]:
    """Task -> the raw rows of the profiles store copies of the stopped instance ``name``."""
    rows = {}
    for path in sorted((cluster.state_dir(name) / cluster.app).glob("*/profiles")):
        with open_store(path, read_only=True) as store:
            rows[path.parent.name] = sorted(key for key, _ in store.all())
    return rows


@pytest.fixture
def cluster(bootstrap_servers, tmp_path):
    previous = os.environ.get("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT")
    os.environ["AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT"] = json.dumps(
        {"conn_type": "stateful_streams", "host": bootstrap_servers})
    cluster = Cluster(bootstrap_servers, tmp_path, "ttl", topology=TOPOLOGY, commit_interval_ms=500,
                      num_standby_replicas=1,
                         processing_guarantee="exactly_once_v2")
    try:
        yield cluster
    finally:
        cluster.kill_all()
        if previous is None:
            os.environ.pop("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT", None)
        else:
            os.environ["AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT"] = previous


def test_maintenance_expires_a_stalled_table_everywhere(cluster):
    now = int(time.time() * 1000)
    old = now - 3 * HOUR
    produce(cluster.bootstrap_servers, cluster.input, [(k, f"v-{k}", old + i) for i, k in enumerate(KEYS)])
    cluster.start("a", "b")
    cluster.wait_running("a", "b")
    wait_committed(cluster)
    assert sorted(r.key.decode() for r in read_all(cluster.bootstrap_servers, cluster.output)) == KEYS

    operator = StoreRetentionOperator(task_id="retention", application_id=cluster.app, now=now)
    operator.timeout_ms = 60_000
    rows = operator.execute({})
    actives = [r for r in rows if r["role"] == "active"]
    assert sorted(r["task_id"] for r in actives) == [f"0_{p}" for p in range(PARTITIONS)], rows
    assert sum(r["result"]["rows_dropped"] for r in actives) == len(KEYS), rows
    assert all(r["result"]["changelog_records_written"] == r["result"]["rows_dropped"] + 1 for r in actives), rows
    assert all("skipped" in r["result"] for r in rows if r["role"] != "active"), rows

    output = read_all(cluster.bootstrap_servers, cluster.output)  # read_committed
    tombstones = sorted(r.key.decode() for r in output if r.value is None)
    assert tombstones == KEYS, [(r.key, r.value) for r in output]
    assert {r.timestamp for r in output if r.value is None} == {old + i + HOUR for i in range(len(KEYS))}
    changelog = read_all(cluster.bootstrap_servers, f"{cluster.app}-profiles-changelog")
    assert sorted(r.key.decode() for r in changelog if r.value is None) == KEYS
    assert {r.partition for r in changelog if r.key == TTL_CUTOFF_KEY} == set(range(PARTITIONS))

    cluster.stop_all()
    # the standbys' copies took the deletes and the cut-off row from the changelog
    copies = {(name, task): keys for name in ("a", "b") for task, keys in table_rows(cluster, name).items()}
    assert len(copies) == 2 * PARTITIONS
    assert all(keys == [TTL_CUTOFF_KEY] for keys in copies.values()), copies

    cluster.start("c")  # an empty disk: both tasks restore from the changelog
    cluster.wait_running("c")
    produce(cluster.bootstrap_servers, cluster.input, [(KEYS[0], "late", old + 10), (KEYS[1], "fresh", now + 1)])
    wait_committed(cluster)
    cluster.instances["c"].stop()
    after = read_all(cluster.bootstrap_servers, cluster.output)[len(output):]
    assert [(r.key.decode(), r.value) for r in after] == [(KEYS[1], b"fresh")]
    restored = [k for keys in table_rows(cluster, "c").values() for k in keys if k not in RESERVED]
    assert restored == [KEYS[1].encode()]
