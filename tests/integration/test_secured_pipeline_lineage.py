"""A DAG on a secured cluster, with lineage: the example pipeline submitted to Spark through a
``stateful_streams`` connection with SASL OAUTHBEARER over TLS (a fixed token, which must
reach the instances on the executors without appearing on a command line), maintained and
stopped through the same connection, with Airflow's OpenLineage listener on (console
transport; a process of its own, so that the listener is on from Airflow's start).

The submit task's events carry the example's source topics as inputs and its sink topics as
outputs, and its OpenLineage parent job reaches spark-submit; store retention reports the
stores it maintained, the changelog check the topics it read. One Spark run serves both
checks: the secured connection end to end through the operator, and lineage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from airflow_stateful_provider.examples.clicks_and_payments import RATES_STORE, SESSIONS_STORE, ExampleSettings
from airflow_stateful_provider.examples.generator import ensure_topics
from airflow_stateful_provider.streams import read_status_documents
from tests.integration.secured_kafka import fresh_token

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]

LINEAGE_DAGS = Path(__file__).resolve().parent / "lineage"
REPO_ROOT = Path(__file__).resolve().parents[2]
# The run's outcome goes to a file: on stdout, print's pieces interleave with the lines the
# listener's own thread logs while the DAG run completes.
RUN = """
import json, os
from pathlib import Path
from tests.integration.lineage.lineage_dag import dag
run = dag.test(run_conf=json.loads(os.environ["LINEAGE_RUN_CONF"]))
Path(os.environ["LINEAGE_RUN_RESULT"]).write_text(json.dumps(
    {"state": run.state, "tasks": {ti.task_id: ti.state for ti in run.get_task_instances()}}))
"""


def events_in(output: str) -> list[dict]:
    """The OpenLineage events the console transport logged, one JSON object per log line."""
    events = []
    for line in output.splitlines():
        if '"eventType"' in line and '"job"' in line:
            events.append(json.loads(line[line.index("{"):line.rindex("}") + 1]))
    return events


def datasets(events: list[dict], job: str, event_type: str, side: str) -> set[tuple[str, str]]:
    (event,) = [e for e in events if e["job"]["name"] == job and e["eventType"] == event_type]
    return {(d["namespace"], d["name"]) for d in event[side]}


def test_a_pipeline_on_a_secured_cluster_runs_and_the_listener_sees_its_topics_and_stores(airflow_db, secured_kafka,
                                                                                           tmp_path):
    app = f"lineage-{uuid.uuid4().hex[:6]}"
    settings = ExampleSettings(clicks_topic=f"{app}-clicks", payments_topic=f"{app}-payments",
                               rates_topic=f"{app}-rates", sessions_topic=f"{app}-sessions",
                               payments_usd_topic=f"{app}-payments-usd")
    app_configs = {name: getattr(settings, name) for name in
                   ("clicks_topic", "payments_topic", "rates_topic", "sessions_topic", "payments_usd_topic")}
    ensure_topics(secured_kafka.plaintext, settings.input_topics + settings.output_topics, 2)
    token = fresh_token()
    env = {**os.environ,
           "AIRFLOW__CORE__DAGS_FOLDER": str(LINEAGE_DAGS),
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "console"}),
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "lineage-test",
           "AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT": json.dumps(secured_kafka.oauth(token=token)),
           "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
           "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "LINEAGE_RUN_CONF": json.dumps({"application_id": app, "app_configs": app_configs}),
           "LINEAGE_RUN_RESULT": str(tmp_path / "run.json")}
    try:
        result = subprocess.run([sys.executable, "-c", RUN], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                                timeout=600)
    finally:
        leftovers = read_status_documents(secured_kafka.plaintext, app, allow_empty=True)
    output = result.stdout + result.stderr
    run = json.loads((tmp_path / "run.json").read_text()) if (tmp_path / "run.json").exists() else None
    assert run is not None and run["state"] == "success", f"{run}\n{output[-5000:]}"
    assert not leftovers, f"the DAG's stop task left instances running: {sorted(leftovers)}"
    events = events_in(output)
    kafka = f"kafka://{secured_kafka.broker.secured_bootstrap_servers('OAUTH')}"
    submit = "lineage_of_a_stateful_pipeline.submit_topology"
    for event_type in ("START", "COMPLETE"):
        assert datasets(events, submit, event_type, "inputs") == {
            (kafka, settings.clicks_topic), (kafka, settings.payments_topic), (kafka, settings.rates_topic)}
        assert datasets(events, submit, event_type, "outputs") == {
            (kafka, settings.sessions_topic), (kafka, settings.payments_usd_topic)}
    # the example's two stateful stores (session and versioned), maintained online: their changelogs
    # openlineage_inject_parent_job_info: the parent job reached spark-submit's properties
    (command,) = [line for line in output.splitlines() if "Spark-Submit cmd:" in line]
    assert f"spark.openlineage.parentJobName={submit}" in command, command
    assert token not in command
    changelogs = {(kafka, f"{app}-{SESSIONS_STORE}-changelog"), (kafka, f"{app}-{RATES_STORE}-changelog")}
    assert datasets(events, "lineage_of_a_stateful_pipeline.enforce_retention", "COMPLETE", "outputs") == changelogs
    assert changelogs <= datasets(events, "lineage_of_a_stateful_pipeline.check_changelog_configs", "COMPLETE",
                                  "inputs")
