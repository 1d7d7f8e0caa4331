"""dags/stateful_pipeline.py end to end through ``dag.test()``: real broker, Spark ``local[3,2]``
(spark-submit launched detached by SubmitTopologyOperator), the deferrable restoration sensor
run by dag.test()'s inline triggerer; then, against the running application, the on-call DAGs
(status table, one key read over the query topics) and the store maintenance DAG (online);
then ``stateful-streams stop`` ends the application."""

from __future__ import annotations

import io
import json
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from airflow_stateful_provider import cli
from airflow_stateful_provider.streams.status.reader import read_status_documents
from tools.spark_app import read_events
from tools.waits import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]

REPO_ROOT = Path(__file__).resolve().parents[2]


def example_dag(file: str, dag_id: str):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=REPO_ROOT / "dags" / file)
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag(dag_id)


def pipeline_dag():
    dag = example_dag("stateful_pipeline.py", "stateful_pipeline")
    for task_id in ("wait_for_restoration", "check_standby_lag"):
        sensor = dag.get_task(task_id)
        sensor.poke_interval, sensor.timeout = 1, 180
    return dag


def test_stateful_pipeline_dag_runs_the_example_on_spark(airflow_db, bootstrap_servers, monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT",
                       json.dumps({"conn_type": "stateful_streams", "host": bootstrap_servers}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[3,2]"}))
    app_id = f"pipeline-{uuid.uuid4().hex[:6]}"
    run = pipeline_dag().test(run_conf={"application_id": app_id, "topic_prefix": f"{app_id}-", "clicks": 1500,
                                        "payments": 300, "users": 50})
    driver_logs = sorted(Path(tempfile.gettempdir(), "stateful-streams").glob(f"{app_id}-*.log"))
    try:
        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        assert run.state == "success", (states, driver_logs and driver_logs[-1].read_text()[-3000:])
        assert states == {t: "success" for t in ("generate_data", "submit_topology", "wait_for_restoration",
                                                  "check_standby_lag", "report")}
        documents = read_status_documents(bootstrap_servers, app_id)
        assert sorted(documents) == [f"{app_id}-0", f"{app_id}-1"]
        assert all(d.state == "RUNNING" for d in documents.values())
        # the DAG's default guarantee reached the instances on Spark through the operator
        assert {d.processing_guarantee for d in documents.values()} == {"exactly_once_v2"}

        # On-call asks for the table of the running application.
        capfd.readouterr()
        oncall = example_dag("oncall_restoration_status.py", "oncall_restoration_status").test(
            run_conf={"application_id": app_id})
        assert oncall.state == "success"
        printed = capfd.readouterr().out
        summary = f"application {app_id}: 2 instance(s), 12 task(s) (0 restoring, 0 unassigned)"
        assert summary in printed, printed[-3000:]
        assert f"{app_id}-0" in printed and f"{app_id}-1" in printed
        unknown = example_dag("oncall_restoration_status.py", "oncall_restoration_status").test(
            run_conf={"application_id": f"{app_id}-typo"})
        assert unknown.state == "failed"

        # On-call reads one key of the running application over its query topics.
        capfd.readouterr()
        query = example_dag("oncall_query_store.py", "oncall_query_store").test(
            run_conf={"application_id": app_id, "store": "currency-rates-store", "key": "EUR"})
        assert query.state == "success"
        printed = capfd.readouterr().out
        assert "currency-rates-store['EUR'] = " in printed and "(found: True) from instance " in printed, \
            printed[-3000:]
        unknown_store = example_dag("oncall_query_store.py", "oncall_query_store").test(
            run_conf={"application_id": app_id, "store": "no-such-store", "key": "EUR"})
        assert unknown_store.state == "failed"

        # The daily maintenance, online against the instances running on Spark.
        maintenance = example_dag("store_maintenance.py", "store_maintenance").test(
            run_conf={"application_id": app_id, "mode": "online"})
        assert maintenance.state == "success", {ti.task_id: ti.state for ti in maintenance.get_task_instances()}
    finally:
        out = io.StringIO()
        code = cli.main(["stop", app_id, "--bootstrap-servers", bootstrap_servers, "--timeout", "120"], out=out)
    assert code == 0, out.getvalue()
    assert len(driver_logs) == 1
    wait_until(lambda: read_events(driver_logs[0], "supervisor_finished"), 120, "the detached driver to finish",
               lambda: driver_logs[0].read_text()[-3000:])
    assert read_events(driver_logs[0], "supervisor_finished")[0]["exit_code"] == 0
    time.sleep(0.5)
    assert read_status_documents(bootstrap_servers, app_id, allow_empty=True) == {}
