"""The maintenance operators against the real broker and two instance processes ("a", "b",
one standby each) counting clicks per session into the session store of
tests/integration/test_control_topic.py.

- dags/store_maintenance.py run by ``dag.test()`` online: retention and compaction answered
  by both instances for every (task, role) they hold; the changelog check (exact, from the
  topology) finds no drift.
- ChangelogConfigOperator: a changelog's ``retention.ms`` changed by hand is exactly the
  drift a dry run reports (and leaves as it is); repair restores it and keeps the other keys.
- offline: "b" stopped by SIGTERM, retention on its state dir drops the segments of its
  stores and (``write_cutoff``) writes their cut-off markers into the changelog; the same on
  the running "a" is refused (its stores are locked).
"""

from __future__ import annotations

import json
import os
import time

import pytest
from airflow.sdk.exceptions import AirflowException
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from airflow_stateful_provider.operators.maintenance import ChangelogConfigOperator, StoreRetentionOperator
from airflow_stateful_provider.streams.state.common.cutoff import SESSION_CUTOFF_KEY, decode_cutoff
from airflow_stateful_provider.streams.state.store_dir import find_stores, open_store
from tests.conftest import REPO_ROOT
from tests.integration.test_control_topic import PARTITIONS, STORE, TOPOLOGY, Cluster, click_records, clicks
from tools.kafka.topics import committed_offsets, end_offsets, produce, read_all, topic_configs
from tools.waits import wait_for_commits

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]

EVERY_TASK_AND_ROLE = {(f"0_{p}", role) for p in range(PARTITIONS) for role in ("active", "standby")}


@pytest.fixture(scope="module")
def cluster(bootstrap_servers, tmp_path_factory):
    """Instances "a" and "b" with one standby each, every click processed and committed, and
    the ``stateful_streams_default`` connection pointing at the broker."""
    previous = os.environ.get("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT")
    os.environ["AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT"] = json.dumps(
        {"conn_type": "stateful_streams", "host": bootstrap_servers})
    cluster = Cluster(bootstrap_servers, tmp_path_factory.mktemp("maintenance"), "maint", commit_interval_ms=500,
                      num_standby_replicas=1)
    hour_ago = int(time.time() * 1000) - 3_600_000
    produce(bootstrap_servers, cluster.input, click_records(clicks(users=10, per_user=8, start_ms=hour_ago)),
            linger_ms=5)
    cluster.start("a", "b")
    try:
        cluster.wait_running("a", "b")
        wait_until_committed(cluster)
        yield cluster
    finally:
        cluster.kill_all()
        if previous is None:
            os.environ.pop("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT", None)
        else:
            os.environ["AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT"] = previous


def wait_until_committed(cluster: Cluster) -> None:
    ends = end_offsets(cluster.bootstrap_servers, cluster.input)
    wait_for_commits(lambda: committed_offsets(cluster.bootstrap_servers, cluster.app, cluster.input), ends,
                     "every click committed", context=cluster.logs)


def streams_config(cluster: Cluster) -> dict:
    return {"app_configs": {"input": cluster.input, "output": cluster.output}}


def return_values(run) -> dict:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, key="return_value")).all()
        return {row.task_id: XComModel.deserialize_value(row) for row in rows}


def test_store_maintenance_dag_online(airflow_db, cluster):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=REPO_ROOT / "dags" / "store_maintenance.py")
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("store_maintenance")
    for task in dag.tasks:
        if hasattr(task, "timeout_ms"):
            task.timeout_ms = 60_000
    before = int(time.time() * 1000)
    run = dag.test(run_conf={"application_id": cluster.app, "mode": "online", "topology": TOPOLOGY,
                             "streams_config": streams_config(cluster)})
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "success", (states, cluster.logs())
    results = return_values(run)

    retention = results["enforce_retention"]
    assert {r["instance"] for r in retention} == {"a", "b"}
    assert {(r["task_id"], r["role"]) for r in retention} == EVERY_TASK_AND_ROLE, retention
    now_ms = retention[0]["result"]["now_ms"]
    assert before <= now_ms <= int(time.time() * 1000)  # default: the wall clock when the task ran
    for row in retention:
        assert row["store"] == STORE and row["result"]["now_ms"] == now_ms
        assert row["result"]["observed_stream_time_after"] == now_ms
    # The clicks ended ~20 minutes ago and the retention is 5 minutes: what was live is dropped.
    assert any(row["result"]["segments_dropped"] for row in retention if row["role"] == "active"), retention

    compaction = results["compact"]
    assert {r["instance"] for r in compaction} == {"a", "b"}
    assert {(r["task_id"], r["role"]) for r in compaction} == EVERY_TASK_AND_ROLE, compaction
    assert all(r["result"]["bytes_after"] > 0 and r["result"]["duration_s"] >= 0 for r in compaction)

    check = results["check_changelog_configs"]
    assert check["checked_topics"] == [f"{cluster.app}-{STORE}-changelog"]
    assert check["drift"] == [] and check["repaired"] == []


def test_changelog_drift_dry_run_then_repair(cluster):
    topic = f"{cluster.app}-{STORE}-changelog"
    original = topic_configs(cluster.bootstrap_servers, topic)
    expected_retention = original["retention.ms"]
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "3600000"})])
    finally:
        admin.close()

    def operator(**kwargs) -> ChangelogConfigOperator:
        return ChangelogConfigOperator(task_id="changelogs", application_id=cluster.app, topology=TOPOLOGY,
                                       streams_config=streams_config(cluster), **kwargs)

    dry = operator().execute({})
    assert [(d["topic"], d["key"], d["expected"], d["actual"], d["repairable"]) for d in dry["drift"]] == [
        (topic, "retention.ms", expected_retention, "3600000", True)]
    assert dry["repaired"] == []
    assert topic_configs(cluster.bootstrap_servers, topic)["retention.ms"] == "3600000"  # untouched

    repaired = operator(repair=True).execute({})
    assert [d["key"] for d in repaired["repaired"]] == ["retention.ms"] and repaired["remaining"] == []
    after = topic_configs(cluster.bootstrap_servers, topic)
    assert after == original  # incremental: every other key kept its value


def test_offline_retention_on_a_stopped_instance(cluster):
    # Fresh clicks so the stores hold live segments again after the online retention.
    produce(cluster.bootstrap_servers, cluster.input,
            click_records(clicks(users=6, per_user=2, start_ms=int(time.time() * 1000) - 60_000)), linger_ms=5)
    wait_until_committed(cluster)
    future = int(time.time() * 1000) + 365 * 24 * 3_600_000

    running = StoreRetentionOperator(task_id="r", application_id=cluster.app, mode="offline",
                                     state_dir=str(cluster.state_dir("a")), now=future)
    with pytest.raises(AirflowException, match="locked by a running instance.*mode='online'"):
        running.execute({})

    assert cluster.instances["b"].stop() == 0, cluster.instances["b"].log_tail()
    state_dir = cluster.state_dir("b")
    live_before = {}
    for path in find_stores(state_dir / cluster.app):
        store = open_store(path, read_only=True)
        try:
            live_before[path] = store.stats().live_segments
        finally:
            store.close()
    assert any(live_before.values()), live_before

    rows = StoreRetentionOperator(task_id="r", application_id=cluster.app, mode="offline",
                                  state_dir=str(state_dir), now=future, write_cutoff=True).execute({})
    assert sorted(r["path"] for r in rows) == sorted(live_before)
    for row in rows:
        assert row["store"] == STORE and row["instance"] is None
        assert row["result"]["observed_stream_time_after"] == future
        dropped = {s["segment_id"] for s in row["result"]["segments_dropped"]}
        assert dropped == {s.segment_id for s in live_before[row["path"]]}, row
        assert row["result"]["changelog_records_written"] == 1, row
        store = open_store(row["path"], read_only=True)
        try:
            assert store.stats().live_segments == ()
        finally:
            store.close()
    # the cut-off went into the changelog partition of every store copy maintained offline
    changelog = read_all(cluster.bootstrap_servers, f"{cluster.app}-{STORE}-changelog")
    markers = [(r.partition, decode_cutoff(r)) for r in changelog if r.key == SESSION_CUTOFF_KEY]
    assert {p for p, cutoff in markers if cutoff == future} == {int(r["task_id"].split("_")[1]) for r in rows}
