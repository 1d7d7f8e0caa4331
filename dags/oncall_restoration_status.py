"""On-call: the restoration status of one application, as a table in the task log.

Trigger it by hand (UI or ``airflow dags trigger oncall_restoration_status --conf
'{"application_id": "clicks"}'``) when someone asks "is it restored yet?". The table has,
per task, the active instance, its state, restored/total changelog records, restore rate
and ETA, and each standby with its lag; then one line per instance (epoch, state, age of
its last document). Instances whose document is older than ``stale_after_seconds`` are
flagged: their numbers are not trusted. The same table is printed by
``stateful-streams status <application_id>`` (docs/runbook.md).

The task fails, with the reason, when the application is unknown (no status documents) or
the brokers cannot be reached; it succeeds otherwise, whatever the restoration state, and
returns the snapshot as JSON (XCom) for follow-up tasks.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param, task

with DAG(
    dag_id="oncall_restoration_status",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["stateful-streams", "on-call"],
    params={
        "application_id": Param("clicks-and-payments", type="string", minLength=1),
        "stale_after_seconds": Param(30, type="integer", minimum=1),
    },
    doc_md=__doc__,
) as dag:

    @task
    def status_table(params: dict | None = None) -> dict:
        """Log the status table of ``params.application_id``; return the snapshot as JSON."""
        from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
        from airflow_stateful_provider.streams import render_status_table

        status = StatefulStreamsHook().get_status(
            params["application_id"], stale_after=timedelta(seconds=params["stale_after_seconds"]))
        print(render_status_table(status))
        return status.to_json_dict()

    status_table()
