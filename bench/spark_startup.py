"""Benchmark: seconds from spark-submit to every task RUNNING (issue 6), on Spark ``local[3,2]``.

Two rounds of ``airflow_stateful_provider/spark/app.py`` with 2 instances of
``tests.integration.topologies:configured_counts`` (4 tasks, one RocksDB key-value store):

- empty: a fresh application, no state;
- restored: a fresh application whose changelog already holds ``--records`` records (filled
  directly by tools/changelog_state.py), so the instances restore them all before RUNNING.

"All tasks RUNNING" is read from the status topic: every task has an active owner whose
document says running, both instances published since the submission. The clock starts
just before spark-submit is launched, so JVM start, SparkSession, job submission, Python
worker start, group join, assignment and restoration are all in it. Each round ends with a
stop command and waits for the driver to exit 0. Prints progress, then as its last line one
JSON object: empty_s, restored_s, records_restored, restore_rps_after_start, machine.

    python bench/spark_startup.py [--records 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from airflow_stateful_provider.streams.control.channel import send_command
from airflow_stateful_provider.streams.control.commands import new_command
from airflow_stateful_provider.streams.status.reader import fetch_application_status
from bench.topologies import machine
from tools.changelog_state import fill_counts_changelog
from tools.kafka.broker import LocalKafkaBroker
from tools.kafka.topics import create_topics
from tools.spark_app import SparkApplication
from tools.waits import wait_until

PARTITIONS = 4
INSTANCES = 2


def all_running(bootstrap: str, app_id: str, since_ms: int) -> bool:
    try:
        status = fetch_application_status(bootstrap, app_id)
    except Exception:  # noqa: BLE001 - nothing published yet
        return False
    return (len(status.instances) == INSTANCES and all(i.published_at >= since_ms for i in status.instances)
            and len(status.tasks) == PARTITIONS
            and all(t.active is not None and t.state == "running" for t in status.tasks))


def run_round(bootstrap: str, work: Path, records: int) -> float:
    app_id = f"bench-startup-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {f"{app_id}-in": PARTITIONS, f"{app_id}-out": PARTITIONS})
    if records:
        began = time.monotonic()
        fill_counts_changelog(bootstrap, app_id, PARTITIONS, records)
        print(f"filled the changelog with {records} records in {time.monotonic() - began:.1f}s", flush=True)
    config = {"application_id": app_id, "bootstrap_servers": bootstrap, "state_dir": str(work / app_id),
              "num_standby_replicas": 0, "status_interval_ms": 200,
              "app_configs": {"input": f"{app_id}-in", "output": f"{app_id}-out"}}
    since_ms = time.time_ns() // 1_000_000
    app = SparkApplication("tests.integration.topologies:configured_counts", config, work, instances=INSTANCES,
                           name=app_id)
    started = time.monotonic()
    app.start()
    try:
        def running() -> bool:
            app.check_running()
            return all_running(bootstrap, app_id, since_ms)

        wait_until(running, 600, "all tasks RUNNING", app.log_tail, interval=0.1)
        seconds = time.monotonic() - started
        print(f"{'restored' if records else 'empty'}: all {PARTITIONS} tasks RUNNING {seconds:.2f}s after "
              f"spark-submit", flush=True)
        send_command(bootstrap, new_command(app_id, "stop"))
        if app.wait(180) != 0:
            raise SystemExit(f"the driver did not exit 0:\n{app.log_tail()}")
        return seconds
    finally:
        app.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-spark-startup-"))
    broker = LocalKafkaBroker(work_dir=work / "broker")
    broker.start()
    try:
        empty = run_round(broker.bootstrap_servers, work, 0)
        restored = run_round(broker.bootstrap_servers, work, args.records)
    finally:
        broker.stop()
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"empty_s": round(empty, 2), "restored_s": round(restored, 2),
                      "records_restored": args.records,
                      "restore_rps_after_start": round(args.records / max(restored - empty, 1e-9)),
                      "master": f"local[{INSTANCES + 1},2]", "machine": machine()}))


if __name__ == "__main__":
    main()
