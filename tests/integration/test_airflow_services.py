"""The example DAGs on a real Airflow deployment that submits to a real Spark cluster.

Airflow runs as its four services (API server, scheduler, DAG processor, triggerer:
tools/airflow_services.py) with the LocalExecutor on SQLite, the project's dags/ folder and
the connections in the environment; ``spark_default`` points at a Spark standalone cluster
on loopback (``spark://127.0.0.1:<port>``, client deploy mode). Everything goes through the
REST API, as an external system would use it:

- the DAG processor parses dags/ without an import error;
- ``wait_for_state``, triggered before the application exists: both sensors go to
  ``deferred`` (they cannot be satisfied yet), and once the application runs the triggerer
  fires their triggers and a worker resumes them to success (their task logs, read through
  the API, say so in that order);
- a triggered ``stateful_pipeline`` run ends ``success``: the operator submitted the topology
  to the cluster and its deferrable sensors passed;
- the instances run on the cluster's executors, not on the Airflow worker;
- ``store_maintenance`` runs online against them and its tasks report what they did (XCom);
- the application and the services stop cleanly.
"""

from __future__ import annotations

import io
import json
import threading
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from airflow_stateful_provider import cli
from airflow_stateful_provider.streams.status.reader import read_status_documents
from tools.airflow_services import FINISHED_RUN_STATES, LocalAirflow
from tools.waits import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]

REPO_ROOT = Path(__file__).resolve().parents[2]
PIPELINE_SENSORS = ("wait_for_restoration", "check_standby_lag")
WAIT_SENSORS = ("state_restored", "standbys_warm")


class StateWatch(threading.Thread):
    """Every state each task instance of a run was seen in, through the REST API."""

    def __init__(self, airflow: LocalAirflow, dag_id: str, run_id: str) -> None:
        super().__init__(name="state-watch", daemon=True)
        self.airflow, self.dag_id, self.run_id = airflow, dag_id, run_id
        self.seen: dict[str, list[str]] = defaultdict(list)
        self.run_state = "queued"
        self._closing = threading.Event()

    def run(self) -> None:
        while not self._closing.is_set():
            for task_id, state in self.airflow.task_states(self.dag_id, self.run_id).items():
                if state and (not self.seen[task_id] or self.seen[task_id][-1] != state):
                    self.seen[task_id].append(state)
            self.run_state = self.airflow.run_state(self.dag_id, self.run_id)
            if self.run_state in FINISHED_RUN_STATES:
                return
            self._closing.wait(0.2)

    def close(self) -> None:
        self._closing.set()
        self.join(30)


def start_run(airflow: LocalAirflow, dag_id: str, conf: dict) -> StateWatch:
    airflow.wait_for_dag(dag_id)
    watch = StateWatch(airflow, dag_id, airflow.trigger(dag_id, conf))
    watch.start()
    return watch


def finish_run(airflow: LocalAirflow, watch: StateWatch, timeout: float) -> str:
    """Until the run ends; returns its id."""
    try:
        wait_until(lambda: airflow.check_running() or not watch.is_alive(), timeout,
                   f"the {watch.dag_id} run to finish", lambda: f"states seen {dict(watch.seen)}\n{airflow.logs()}",
                   interval=0.5)
    finally:
        watch.close()
    return watch.run_id


def assert_deferred_and_resumed(airflow: LocalAirflow, watch: StateWatch, task_id: str) -> None:
    """The task runner deferred the task, the triggerer (only it logs "Trigger fired event")
    fired its trigger, and a worker resumed it to success: its log, read through the API."""
    log = airflow.task_log(watch.dag_id, watch.run_id, task_id)
    assert "Pausing task as DEFERRED" in log, (task_id, log[-3000:])
    assert "Trigger fired event" in log, (task_id, log[-3000:])
    assert log.index("Trigger fired event") > log.index("Pausing task as DEFERRED"), (task_id, log[-3000:])
    assert watch.seen[task_id][-1] == "success", (task_id, dict(watch.seen))


def test_example_dags_on_airflow_services_and_a_spark_cluster(spark_cluster, bootstrap_servers, tmp_path):
    app_id = f"services-{uuid.uuid4().hex[:6]}"
    host, port = spark_cluster.master_url.rsplit(":", 1)
    airflow = LocalAirflow(tmp_path / "airflow-home", dags_folder=REPO_ROOT / "dags", env={
        "AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT": json.dumps({"conn_type": "stateful_streams",
                                                             "host": bootstrap_servers}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": host, "port": int(port),
                                                  "extra": {"deploy-mode": "client"}}),
        # the driver and the executors bind to loopback, like the cluster
        "SPARK_LOCAL_IP": "127.0.0.1",
    })
    airflow.start()
    print(f"\nAirflow services on {airflow.url} started in {airflow.start_seconds:.1f}s")
    stopped_application = False
    try:
        # Waiting for an application that does not run yet: both sensors must defer.
        waiting = start_run(airflow, "wait_for_state", {"application_id": app_id})
        wait_until(lambda: [waiting.seen[t][-1:] for t in WAIT_SENSORS] == [["deferred"]] * 2, 120,
                   "both wait_for_state sensors deferred", lambda: f"{dict(waiting.seen)}\n{airflow.logs()}")

        pipeline = start_run(airflow, "stateful_pipeline", {
            "application_id": app_id, "topic_prefix": f"{app_id}-", "users": 50, "clicks": 1500, "payments": 300})
        run_id = finish_run(airflow, pipeline, timeout=420)
        task_states = airflow.task_states("stateful_pipeline", run_id)
        assert pipeline.run_state == "success", (task_states, dict(pipeline.seen), airflow.logs())
        assert set(task_states.values()) == {"success"}, task_states
        # its sensors poll once before deferring: whether they deferred depends on how far the
        # instances are by then, so it is shown, not asserted
        print(f"stateful_pipeline sensors: { {t: pipeline.seen[t] for t in PIPELINE_SENSORS} }")

        finish_run(airflow, waiting, timeout=120)
        assert waiting.run_state == "success", (dict(waiting.seen), airflow.logs())
        for sensor in WAIT_SENSORS:
            assert_deferred_and_resumed(airflow, waiting, sensor)

        # the instances run on the cluster's executors
        documents = read_status_documents(bootstrap_servers, app_id)
        assert sorted(documents) == [f"{app_id}-0", f"{app_id}-1"]
        assert all(d.state == "RUNNING" for d in documents.values()), documents
        for document in documents.values():
            spark_cluster.executor_of(document.pid)  # raises unless it runs under an executor JVM
        submitted = airflow.xcom("stateful_pipeline", run_id, "submit_topology")
        assert submitted["master"] == spark_cluster.master_url and submitted["deploy_mode"] == "client", submitted
        reported = airflow.xcom("stateful_pipeline", run_id, "report")
        # every payment priced (sessions are emitted when they close, which this short input may not reach)
        assert reported["payments_usd"] == 300, reported

        maintenance = start_run(airflow, "store_maintenance", {"application_id": app_id, "mode": "online"})
        maintenance_id = finish_run(airflow, maintenance, timeout=180)
        assert maintenance.run_state == "success", (dict(maintenance.seen), airflow.logs())
        retention = airflow.xcom("store_maintenance", maintenance_id, "enforce_retention")
        compaction = airflow.xcom("store_maintenance", maintenance_id, "compact")
        for report in (retention, compaction):
            assert report, report
            # one row per store each instance maintained
            assert {r["instance"] for r in report} == set(documents) and all(r["store"] for r in report), report
        changelogs = airflow.xcom("store_maintenance", maintenance_id, "check_changelog_configs")
        assert changelogs, changelogs

        out = io.StringIO()
        code = cli.main(["stop", app_id, "--bootstrap-servers", bootstrap_servers, "--timeout", "120"], out=out)
        assert code == 0, out.getvalue()
        stopped_application = True
    finally:
        if not stopped_application:
            cli.main(["stop", app_id, "--bootstrap-servers", bootstrap_servers, "--timeout", "60"], out=io.StringIO())
        codes = airflow.stop()
    assert codes == {component: 0 for component in codes}, (codes, airflow.logs())
