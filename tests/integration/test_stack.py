"""The whole stack together: Airflow runs a SparkSubmitOperator whose Spark tasks write RocksDB
state and produce to the real local Kafka broker; every record must arrive."""

from __future__ import annotations

import json
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]


def consume_all(bootstrap_servers: str, topic: str, partitions: int) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=2000)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    end = consumer.end_offsets(tps)
    records = []
    while any(consumer.position(tp) < end[tp] for tp in tps):
        for batch in consumer.poll(timeout_ms=1000).values():
            records.extend(batch)
    consumer.close()
    return records


def test_stack_check_dag_spark_rocksdb_kafka(bootstrap_servers, example_dags, spark_local_connection):
    dag = example_dags.get_dag("stack_check")
    topic = f"stack-check-{uuid.uuid4().hex[:8]}"
    tasks, records = 2, 250

    run = dag.test(run_conf={"bootstrap_servers": bootstrap_servers, "topic": topic,
                             "tasks": tasks, "records": records})

    assert run.state == "success", f"DAG run ended {run.state}"
    received = consume_all(bootstrap_servers, topic, tasks)
    keys = sorted(r.key.decode() for r in received)
    expected = sorted(f"task{t}-key{i}" for t in range(tasks) for i in range(records))
    assert keys == expected
    for record in received:
        task = json.loads(record.value)["task"]
        assert record.partition == task
        assert record.key.decode().startswith(f"task{task}-")
