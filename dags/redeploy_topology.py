"""Deploy a changed topology over an application's state: the plan first, then the submission.

Stop the running application first (``stateful-streams stop <application_id>``): the
operator refuses to submit over live instances. Then trigger this DAG with the new
topology (``airflow dags trigger redeploy_topology --conf '{"application_id": "clicks",
"topology": "my_pipeline.topology:build_v2"}'``). ``submit_topology`` compares it with the
topology the application last started with (docs/redeploying.md) and logs the plan: stores
kept, new (starting empty), dropped (their changelogs orphaned), changed in a way their data
cannot follow. On such a change the task fails and nothing is submitted, unless
``on_incompatible`` is ``reset``: then the application is reset (input offsets to the
earliest, internal topics deleted) and starts over from its input. The plan is in XCom
(``topology_plan``). ``stateful-streams plan`` prints the same plan without deploying.

Connections: ``stateful_streams_default`` (Kafka) and ``spark_default`` (the Spark master;
``local[N,F]`` needs N >= instances + 1).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_stateful_provider.operators.submit import SubmitTopologyOperator

with DAG(
    dag_id="redeploy_topology",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["stateful-streams", "example"],
    render_template_as_native_obj=True,
    params={
        "application_id": Param("clicks-and-payments", type="string", minLength=1),
        "topology": Param("airflow_stateful_provider.examples.clicks_and_payments:build_topology", type="string",
                          pattern=r"^[\w.]+:\w+$", description="package.module:function of the new topology"),
        "instances": Param(2, type="integer", minimum=1),
        "on_incompatible": Param("fail", enum=["fail", "reset"],
                                 description="reset: start the application over when its state cannot follow"),
        "streams_config": Param({"commit_interval_ms": 1000}, type="object",
                                description="StreamsConfig values besides application_id"),
    },
    doc_md=__doc__,
) as dag:
    SubmitTopologyOperator(
        task_id="submit_topology",
        topology="{{ params.topology }}",
        instances="{{ params.instances }}",
        on_incompatible="{{ params.on_incompatible }}",
        streams_config="{{ dict(params.streams_config, application_id=params.application_id) }}",
        conn_id="spark_default",
    )
