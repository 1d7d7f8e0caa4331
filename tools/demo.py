"""`make demo`: the stack end to end on this machine.

Starts a local Kafka broker, runs the ``stack_check`` DAG through Airflow (``dag.test()`` on
a SQLite database under ``.local/airflow``) whose SparkSubmitOperator runs a ``local[2]`` Spark
job that writes RocksDB state and produces to Kafka, then reads the topic back and prints what
happened. The broker is stopped on exit, including after Ctrl-C.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCAL = REPO_ROOT / ".local"
AIRFLOW_HOME = LOCAL / "airflow"

os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO_ROOT / "dags")
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}"
os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = '{"conn_type": "spark", "host": "local[2]"}'
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

sys.path.insert(0, str(REPO_ROOT))

from tools.kafka.broker import BrokerError, LocalKafkaBroker  # noqa: E402

TASKS, RECORDS = 2, 500


def step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def read_topic(bootstrap_servers: str, topic: str, partitions: int) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    counts = {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    consumer.close()
    return counts


def main() -> int:
    AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    step("Starting a local Kafka broker (KRaft, loopback)")
    try:
        broker = LocalKafkaBroker(work_dir=LOCAL / "demo-kafka").start()
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"    broker {broker.bootstrap_servers} up in {broker.start_seconds:.1f}s (log {broker.log_path})")

        step(f"Migrating the Airflow metadata database in {AIRFLOW_HOME}")
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                       stdout=subprocess.DEVNULL)

        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=REPO_ROOT / "dags")
        if bag.import_errors:
            print(f"error: DAG import errors: {bag.import_errors}", file=sys.stderr)
            return 1
        dag = bag.get_dag("stack_check")
        topic = f"stack-check-demo-{int(time.time())}"
        step(f"Running DAG stack_check: SparkSubmitOperator on local[2], {TASKS} Spark tasks x {RECORDS} "
             f"RocksDB keys -> Kafka topic {topic}")
        began = time.monotonic()
        run = dag.test(run_conf={"bootstrap_servers": broker.bootstrap_servers, "topic": topic,
                                 "tasks": TASKS, "records": RECORDS})
        print(f"    DAG run {run.run_id}: {run.state} in {time.monotonic() - began:.1f}s")
        if run.state != "success":
            return 1

        step("Reading the topic back")
        counts = read_topic(broker.bootstrap_servers, topic, TASKS)
        for partition, count in sorted(counts.items()):
            print(f"    partition {partition}: {count} records")
        total = sum(counts.values())
        print(f"    total {total} of {TASKS * RECORDS} expected: {'OK' if total == TASKS * RECORDS else 'MISSING'}")
        return 0 if total == TASKS * RECORDS else 1
    finally:
        step("Stopping the broker")
        broker.stop()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
