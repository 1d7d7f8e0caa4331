"""The example stateful pipeline, end to end: generate data, run the topology on Spark, wait
until its state is restored and its standbys are warm, report.

1. ``generate_data``: clicks, payments and currency rates (airflow_stateful_provider.examples.generator)
   into the input topics (``generate=false``: only make sure the topics exist, e.g. to
   resubmit the application over the data it already processed).
2. ``submit_topology``: the example topology (user click sessions + payments joined as-of with
   the rates) as ``instances`` supervised instances on Spark; returns once they report in.
   Its task instance links to the "Stateful streams" page (Browse menu) and the Spark UI.
   The application keeps running after this DAG: stop it with
   ``stateful-streams stop <application_id>`` (or the task's on_kill).
3. ``wait_for_restoration`` and ``check_standby_lag`` (both deferrable: they wait in the
   triggerer, not in a worker slot): gate on the state.
4. ``report``: the status table and a sample of both outputs in the task log.

Connections: ``stateful_streams_default`` (Kafka) and ``spark_default`` (the Spark master;
``local[N,F]`` needs N >= instances + 1). Parameters: see ``params`` below; ``topic_prefix``
keeps runs apart.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_stateful_provider.operators.submit import SubmitTopologyOperator
from airflow_stateful_provider.sensors.restoration import RestorationSensor
from airflow_stateful_provider.sensors.standby_lag import StandbyLagSensor

TOPOLOGY = "airflow_stateful_provider.examples.clicks_and_payments:build_topology"
TOPICS = ("clicks_topic", "payments_topic", "rates_topic", "sessions_topic", "payments_usd_topic")


def topic_names(prefix: str) -> dict[str, str]:
    """The example's topic names (its defaults), each with ``prefix`` in front."""
    from airflow_stateful_provider.examples.clicks_and_payments import ExampleSettings

    defaults = ExampleSettings()
    return {name: f"{prefix}{getattr(defaults, name)}" for name in TOPICS}


with DAG(
    dag_id="stateful_pipeline",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["stateful-streams", "example"],
    render_template_as_native_obj=True,
    params={
        "application_id": Param("clicks-and-payments", type="string", minLength=1),
        "topic_prefix": Param("", type="string"),
        "instances": Param(2, type="integer", minimum=1),
        "processing_guarantee": Param("exactly_once_v2", enum=["exactly_once_v2", "at_least_once"]),
        "num_standby_replicas": Param(1, type="integer", minimum=0),
        "partitions": Param(4, type="integer", minimum=1),
        "generate": Param(True, type="boolean", description="false: reuse the data already in the topics"),
        "seed": Param(1, type="integer"),
        "data_age_hours": Param(0, type="number", minimum=0, maximum=40,
                                description="place the generated data this many hours further in the past "
                                            "(it ends 30 minutes before now otherwise)"),
        "users": Param(100, type="integer", minimum=1),
        "clicks": Param(3000, type="integer", minimum=1),
        "payments": Param(600, type="integer", minimum=0),
        "status_interval_ms": Param(1000, type="integer", minimum=50,
                                    description="how often each instance publishes its status document"),
        "snapshot_url": Param("", type="string",
                              description="store snapshots on shared storage, e.g. file:///mnt/shared/snapshots "
                                          "(docs/snapshots.md); empty: off"),
        "snapshot_conn_id": Param(None, type=["null", "string"],
                                  description="Airflow connection of the snapshot location (credentials)"),
    },
    doc_md=__doc__,
) as dag:

    @task
    def generate_data(params: dict | None = None) -> dict:
        """Create the example's topics and produce the generated records (rates first)."""
        from airflow_stateful_provider.examples.generator import ensure_topics, generate, produce
        from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook

        configs = StatefulStreamsHook().get_client_configs()
        servers = configs.pop("bootstrap_servers")
        topics = topic_names(params["topic_prefix"])
        ensure_topics(",".join(servers), topics.values(), params["partitions"], client_configs=configs)
        if not params["generate"]:
            return {"sent": {}, "topics": topics}
        import time

        now_ms = int(time.time() * 1000) - int(float(params.get("data_age_hours") or 0) * 3_600_000)
        records = generate(seed=params["seed"], users=params["users"], clicks=params["clicks"],
                           payments=params["payments"], now_ms=now_ms)
        sent = produce(",".join(servers), records, clicks_topic=topics["clicks_topic"],
                       payments_topic=topics["payments_topic"], rates_topic=topics["rates_topic"],
                       partitions=params["partitions"], client_configs=configs)
        return {"sent": sent, "topics": topics}

    submit = SubmitTopologyOperator(
        task_id="submit_topology",
        topology=TOPOLOGY,
        instances="{{ params.instances }}",
        processing_guarantee="{{ params.processing_guarantee }}",
        snapshot_url="{{ params.snapshot_url }}",
        snapshot_conn_id="{{ params.snapshot_conn_id }}",
        streams_config={
            "application_id": "{{ params.application_id }}",
            "num_standby_replicas": "{{ params.num_standby_replicas }}",
            "commit_interval_ms": 1000,
            "status_interval_ms": "{{ params.status_interval_ms }}",
            # a failed instance's tasks move after 10 s, not the 45 s default
            "consumer_configs": {"session_timeout_ms": 10_000},
            "app_configs": "{{ ti.xcom_pull(task_ids='generate_data')['topics'] }}",
        },
        conn_id="spark_default",
        # the Spark UI stays on: the task instance links to it ("Spark UI" extra link)
    )

    restored = RestorationSensor(
        task_id="wait_for_restoration",
        application_id="{{ params.application_id }}",
        deferrable=True,
        poll_interval=5,
        timeout=1800,
    )

    standbys = StandbyLagSensor(
        task_id="check_standby_lag",
        application_id="{{ params.application_id }}",
        max_lag_records=1000,
        min_standbys_per_task=1,
        deferrable=True,
        poll_interval=5,
        timeout=1800,
    )

    @task
    def report(params: dict | None = None, ti=None) -> dict:
        """The status table and a few sessions and priced payments, for the log."""
        from airflow_stateful_provider.examples.expected import read_outputs
        from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
        from airflow_stateful_provider.streams import render_status_table

        hook = StatefulStreamsHook()
        print(render_status_table(hook.get_status(params["application_id"])))
        topics = ti.xcom_pull(task_ids="generate_data")["topics"]
        configs = hook.get_client_configs()
        servers = configs.pop("bootstrap_servers")
        outputs = read_outputs(",".join(servers), sessions_topic=topics["sessions_topic"],
                               payments_usd_topic=topics["payments_usd_topic"], client_configs=configs)
        for key, session in sorted(outputs.sessions.items())[:5]:
            print(f"session {key}: {session}")
        for payment_id, payment in sorted(outputs.payments_usd.items())[:5]:
            print(f"payment {payment_id}: {payment}")
        return {"sessions": len(outputs.sessions), "payments_usd": len(outputs.payments_usd)}

    generate_data() >> submit >> restored >> standbys >> report()
