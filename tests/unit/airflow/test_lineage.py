"""OpenLineage of the operators without a broker: dataset names (OpenLineage naming spec),
what each operator reports, the parent job handed to Spark. The run through Airflow's
OpenLineage listener is tests/integration/test_secured_pipeline_lineage.py."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pendulum
import pytest

from airflow_stateful_provider.operators.lineage import kafka_namespace, location_dataset
from airflow_stateful_provider.operators.maintenance import StoreCompactionOperator, StoreRetentionOperator
from airflow_stateful_provider.operators.snapshots import SnapshotRetentionOperator
from airflow_stateful_provider.operators.submit import SubmitTopologyOperator

TOPOLOGY = "airflow_stateful_provider.examples.clicks_and_payments:build_topology"


@pytest.fixture(autouse=True)
def connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT", json.dumps(
        {"conn_type": "stateful_streams", "host": "b1:9092,b2:9092"}))


def names(datasets) -> list[tuple[str, str]]:
    return [(d.namespace, d.name) for d in datasets]


def test_kafka_datasets_are_named_after_the_first_bootstrap_server():
    assert kafka_namespace("b1:9092,b2:9092") == kafka_namespace(["b1:9092", "b2:9092"]) == "kafka://b1:9092"


@pytest.mark.parametrize("url, expected", [
    ("s3://bucket/snapshots/clicks", ("s3://bucket", "snapshots/clicks")),
    ("gs://bucket/clicks", ("gs://bucket", "clicks")),
    ("file:///mnt/snapshots/clicks", (f"file://{socket.gethostname()}", "/mnt/snapshots/clicks")),
])
def test_snapshot_locations_follow_the_naming_spec(url, expected):
    assert names([location_dataset(url)]) == [expected]


def test_submit_reports_source_topics_as_inputs_and_sink_topics_as_outputs():
    op = SubmitTopologyOperator(task_id="submit", topology=TOPOLOGY, streams_config={"application_id": "clicks"})
    lineage = op.get_openlineage_facets_on_start()
    kafka = "kafka://b1:9092"
    # repartition and changelog topics are internal: not datasets of the pipeline
    assert names(lineage.inputs) == [(kafka, "clicks"), (kafka, "currency-rates"), (kafka, "payments")]
    assert names(lineage.outputs) == [(kafka, "payments-usd"), (kafka, "user-sessions")]
    assert names(op.get_openlineage_facets_on_complete(None).outputs) == names(lineage.outputs)


def test_the_streams_configs_own_brokers_name_the_datasets():
    op = SubmitTopologyOperator(task_id="submit", topology=TOPOLOGY,
                                streams_config={"application_id": "clicks", "bootstrap_servers": "other:9093"})
    assert {d.namespace for d in op.get_openlineage_facets_on_start().inputs} == {"kafka://other:9093"}


def test_a_topology_that_does_not_load_gives_no_lineage_and_says_why(capsys):
    op = SubmitTopologyOperator(task_id="submit", topology="no_such_module:build",
                                streams_config={"application_id": "clicks"})
    lineage = op.get_openlineage_facets_on_start()
    assert lineage.inputs == [] and lineage.outputs == []
    assert "no lineage for no_such_module:build: cannot import module 'no_such_module'" in capsys.readouterr().out


def context_of(dag_id: str, task_id: str) -> dict:
    run = SimpleNamespace(logical_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
                          run_after=pendulum.datetime(2026, 1, 1, tz="UTC"), clear_number=0, run_id="r1",
                          dag_id=dag_id, conf={})
    ti = SimpleNamespace(dag_id=dag_id, task_id=task_id, try_number=1, map_index=-1, dag_run=run, run_id="r1",
                         logical_date=run.logical_date, get_template_context=lambda: {"dag_run": run})
    return {"ti": ti, "dag_run": run}


@pytest.mark.parametrize("inject", [True, False])
def test_openlineage_inject_parent_job_info_reaches_the_spark_properties(inject):
    op = SubmitTopologyOperator(task_id="submit", topology=TOPOLOGY, streams_config={"application_id": "clicks"},
                                openlineage_inject_parent_job_info=inject)
    properties = op._with_openlineage_properties({"spark.executor.cores": "1"}, context_of("pipeline", "submit"))
    assert properties["spark.executor.cores"] == "1"
    if inject:
        assert properties["spark.openlineage.parentJobName"] == "pipeline.submit"
        assert properties["spark.openlineage.rootParentJobName"] == "pipeline"
        assert properties["spark.openlineage.parentRunId"]
    else:
        assert not any(key.startswith("spark.openlineage.") for key in properties)


def test_offline_maintenance_reports_the_store_directories_it_maintained():
    op = StoreRetentionOperator(task_id="retention", mode="offline", state_dir="/state")
    op._rows = [{"path": "/state/clicks/0_0/sessions", "store": "sessions", "result": {"dropped_segments": 2}},
                {"path": "/state/clicks/0_0/counts", "store": "counts", "result": {"skipped": "keyvalue store"}},
                {"path": "/state/clicks/0_1/sessions", "store": "sessions", "result": {"error": "OSError: disk"}}]
    lineage = op.get_openlineage_facets_on_complete(None)
    assert names(lineage.outputs) == [(f"file://{socket.gethostname()}", "/state/clicks/0_0/sessions")]
    assert lineage.inputs == []


def test_online_maintenance_reports_each_maintained_store_as_its_changelog():
    op = StoreCompactionOperator(task_id="compact", application_id="clicks")
    op._rows = [{"instance": "clicks-0", "task_id": "0_0", "store": "sessions", "result": {"bytes_after": 1}},
                {"instance": "clicks-1", "task_id": "0_0", "store": "sessions", "result": {"bytes_after": 1}},
                {"instance": "clicks-1", "task_id": "1_0", "store": "rates", "result": {"skipped": "in memory"}}]
    assert names(op.get_openlineage_facets_on_complete(None).outputs) == [
        ("kafka://b1:9092", "clicks-sessions-changelog")]


@pytest.mark.parametrize("deleted, outputs", [(False, 0), (True, 1)])
def test_snapshot_retention_reports_the_location_as_output_only_when_it_deleted(deleted, outputs):
    op = SnapshotRetentionOperator(task_id="prune", application_id="clicks", snapshot_url="s3://bucket/snaps/",
                                   keep=2)
    op._deleted_any = deleted
    lineage = op.get_openlineage_facets_on_complete(None)
    assert names(lineage.inputs) == [("s3://bucket", "snaps/clicks")]
    assert len(lineage.outputs) == outputs
