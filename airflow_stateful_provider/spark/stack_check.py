"""Stack check: prove that Spark executors can write RocksDB state and reach Kafka.

Submit it with spark-submit before deploying a topology to a new cluster. Each of
``--tasks`` Spark tasks writes ``--records`` keys into a RocksDB store (rocksdict) under
its executor's local directory, reads them back, and produces one Kafka record per key to
``--topic``. The driver prints one JSON summary line prefixed with ``STACK-CHECK``; the
application exits non-zero if any task fell short.

    spark-submit --master 'local[2]' stack_check.py --bootstrap-servers 127.0.0.1:9092 \
        --topic stack-check --tasks 2 --records 100
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="stack_check", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--tasks", type=int, default=2, help="Spark tasks (and topic partitions)")
    parser.add_argument("--records", type=int, default=100, help="records per task")
    args = parser.parse_args(argv)
    if args.tasks < 1:
        parser.error(f"--tasks must be >= 1, got {args.tasks}")
    if args.records < 1:
        parser.error(f"--records must be >= 1, got {args.records}")
    return args


def ensure_topic(bootstrap_servers: str, topic: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="stack-check")
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


def run_task(index: int, bootstrap_servers: str, topic: str, records: int) -> dict:
    """One Spark task: RocksDB round trip, then one Kafka record per stored key."""
    from kafka import KafkaProducer
    from rocksdict import Rdict

    local_dirs = os.environ.get("SPARK_LOCAL_DIRS", tempfile.gettempdir()).split(",")
    store_dir = tempfile.mkdtemp(prefix=f"stack-check-{index}-", dir=local_dirs[0])
    try:
        db = Rdict(store_dir)
        for i in range(records):
            db[f"task{index}-key{i}"] = i
        stored = {str(key): db[key] for key in db.keys()}  # the keys written above: str
        db.close()
        if len(stored) != records:
            raise RuntimeError(f"task {index}: RocksDB returned {len(stored)} keys, wrote {records}")

        producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", client_id=f"stack-check-{index}")
        for key, value in stored.items():
            producer.send(topic, key=key.encode(), value=json.dumps({"value": value, "task": index}).encode(),
                          partition=index)
        producer.flush()
        producer.close()
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    return {"task": index, "rocksdb_keys": len(stored), "produced": len(stored), "pid": os.getpid()}


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    from pyspark.sql import SparkSession

    began = time.monotonic()
    ensure_topic(args.bootstrap_servers, args.topic, args.tasks)
    spark = SparkSession.builder.appName("stateful-streams-stack-check").getOrCreate()
    try:
        bootstrap, topic, records = args.bootstrap_servers, args.topic, args.records
        results = (spark.sparkContext.parallelize(range(args.tasks), args.tasks)
                   .map(lambda index: run_task(index, bootstrap, topic, records))
                   .collect())
    finally:
        spark.stop()
    produced = sum(r["produced"] for r in results)
    summary = {"topic": args.topic, "tasks": len(results), "produced": produced,
               "expected": args.tasks * args.records, "seconds": round(time.monotonic() - began, 2),
               "per_task": results}
    print("STACK-CHECK " + json.dumps(summary), flush=True)
    return 0 if produced == summary["expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
