"""Stack check DAG: Spark executors write RocksDB state and produce to Kafka.

Run it once per environment, before the first topology: a green run proves that the
Airflow worker can spark-submit, that executors have rocksdict and kafka-python, and that
they reach the brokers. Parameters: ``bootstrap_servers``, ``topic``, ``tasks``, ``records``.
The Spark master comes from the ``spark_default`` Airflow connection.
"""

from __future__ import annotations

import os
import sys

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param

import airflow_stateful_provider.spark.stack_check as stack_check_app

# Executors use the same interpreter as this worker unless told otherwise.
PYSPARK_PYTHON = os.environ.get("PYSPARK_PYTHON", sys.executable)

with DAG(
    dag_id="stack_check",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["stateful-streams", "diagnostics"],
    params={
        "bootstrap_servers": Param("127.0.0.1:9092", type="string"),
        "topic": Param("stateful-streams-stack-check", type="string"),
        "tasks": Param(2, type="integer", minimum=1),
        "records": Param(100, type="integer", minimum=1),
    },
    doc_md=__doc__,
) as dag:
    SparkSubmitOperator(
        task_id="spark_rocksdb_kafka",
        application=stack_check_app.__file__,
        conn_id="spark_default",
        name="stateful-streams-stack-check",
        application_args=[
            "--bootstrap-servers", "{{ params.bootstrap_servers }}",
            "--topic", "{{ params.topic }}",
            "--tasks", "{{ params.tasks }}",
            "--records", "{{ params.records }}",
        ],
        conf={"spark.pyspark.python": PYSPARK_PYTHON, "spark.pyspark.driver.python": PYSPARK_PYTHON,
              "spark.ui.enabled": "false"},
        env_vars={"PYSPARK_PYTHON": PYSPARK_PYTHON},
    )
