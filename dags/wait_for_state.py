"""Wait for a stateful application's state: every task restored, and warm standbys.

Run it after the application (re)starts or fails over, before work that needs its state to
be current (queries against its stores, moving traffic to it). The sensors read the
application's status topic through the ``stateful_streams_default`` connection; each poll
logs a table of restored/total, rate and ETA per task, and a timeout fails with the table
of the tasks still restoring, unassigned or owned by a stale instance. The two sensors wait
side by side (standbys restore the same changelogs as the active tasks, so neither waits
for the other); the run succeeds when both conditions hold. An application that does not
exist yet is waited for too: start the DAG before submitting it.

Two DAGs, one per way of waiting:
- ``wait_for_state`` defers to the triggerer: no worker slot is held while state restores
  (restoring a large store can take hours). The default.
- ``wait_for_state_in_worker`` pokes from a worker, for deployments without a triggerer.

Parameter: ``application_id``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_stateful_provider.sensors.restoration import RestorationSensor
from airflow_stateful_provider.sensors.standby_lag import StandbyLagSensor

for dag_id, deferrable in (("wait_for_state", True), ("wait_for_state_in_worker", False)):
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        tags=["stateful-streams"],
        params={"application_id": Param("clicks", type="string", minLength=1)},
        doc_md=__doc__,
    ) as dag:
        RestorationSensor(
            task_id="state_restored",
            application_id="{{ params.application_id }}",
            max_remaining_records=0,
            deferrable=deferrable,
            poll_interval=10,
            timeout=6 * 3600,
        )
        StandbyLagSensor(
            task_id="standbys_warm",
            application_id="{{ params.application_id }}",
            max_lag_records=10_000,
            min_standbys_per_task=1,
            deferrable=deferrable,
            poll_interval=10,
            timeout=6 * 3600,
        )
    globals()[dag_id] = dag
