"""The DAG tests/integration/test_secured_pipeline_lineage.py runs in a process of its own, with Airflow's
OpenLineage listener on (its console transport): submit the example topology, maintain its
stores online, check its changelog configs, stop it. Topics and ids come from run conf."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_stateful_provider.operators.maintenance import ChangelogConfigOperator, StoreRetentionOperator
from airflow_stateful_provider.operators.submit import SubmitTopologyOperator

TOPOLOGY = "airflow_stateful_provider.examples.clicks_and_payments:build_topology"
APP = "{{ dag_run.conf['application_id'] }}"

with DAG(dag_id="lineage_of_a_stateful_pipeline", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         render_template_as_native_obj=True) as dag:
    submit = SubmitTopologyOperator(
        task_id="submit_topology", topology=TOPOLOGY, instances=1,
        streams_config={"application_id": APP, "commit_interval_ms": 200, "status_interval_ms": 300,
                        "app_configs": "{{ dag_run.conf['app_configs'] }}"},
        openlineage_inject_parent_job_info=True)
    retention = StoreRetentionOperator(task_id="enforce_retention", application_id=APP)
    configs = ChangelogConfigOperator(task_id="check_changelog_configs", application_id=APP, topology=TOPOLOGY,
                                      streams_config={"app_configs": "{{ dag_run.conf['app_configs'] }}"})

    @task
    def stop(application_id: str) -> None:
        from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook

        hook = StatefulStreamsHook()
        status = hook.get_status(application_id)
        command = hook.send_command(application_id, "stop")
        outcome = hook.wait_for_command(command, instances=[i.instance_id for i in status.instances], timeout=120)
        assert outcome.succeeded, outcome

    submit >> retention >> configs >> stop(APP)
