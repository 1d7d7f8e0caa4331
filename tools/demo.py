"""`make demo`: the example stateful pipeline end to end on this machine.

1. a local Kafka broker (KRaft, loopback) and an Airflow metadata database (SQLite under
   ``.local/airflow``; DAGs run with ``dag.test()``);
2. the ``stateful_pipeline`` DAG: generated clicks, payments and currency rates; the example
   topology submitted to Spark ``local[3,2]`` as 2 supervised instances with standbys; the
   restoration and standby-lag sensors; a report;
3. a restart: the application is stopped and submitted again over the same data, and the
   status table is printed while the new instances restore their stores from the changelogs;
4. a sample of the sessions and the payments priced as of their time;
5. the ``store_maintenance`` DAG against the running application (retention, compaction,
   changelog config check);
6. a clean stop (``stateful-streams stop``): the driver exits 0.

The broker is stopped on exit, and the application too after a failure or Ctrl-C.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCAL = REPO_ROOT / ".local"
AIRFLOW_HOME = LOCAL / "airflow"

os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO_ROOT / "dags")
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}"
os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = '{"conn_type": "spark", "host": "local[3,2]"}'
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

sys.path.insert(0, str(REPO_ROOT))

from tools.kafka.broker import BrokerError, LocalKafkaBroker  # noqa: E402

DATA = {"users": 2_000, "clicks": 60_000, "payments": 10_000}


def step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def load_dag(file: str, dag_id: str):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=REPO_ROOT / "dags" / file)
    if bag.import_errors:
        raise SystemExit(f"error: DAG import errors: {bag.import_errors}")
    return bag.get_dag(dag_id)


def run_dag(file: str, dag_id: str, conf: dict) -> None:
    began = time.monotonic()
    run = load_dag(file, dag_id).test(run_conf=conf)
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    print(f"    DAG {dag_id}: {run.state} in {time.monotonic() - began:.1f}s {states}", flush=True)
    if run.state != "success":
        raise SystemExit(f"error: DAG {dag_id} ended {run.state}")


class StatusPrinter(threading.Thread):
    """Prints the application's status table whenever a task's state, owner or progress
    changes (restoring, running, standbys' lag), until stopped; then the last one."""

    def __init__(self, bootstrap_servers: str, application_id: str) -> None:
        super().__init__(daemon=True, name="status-printer")
        self.bootstrap_servers, self.application_id = bootstrap_servers, application_id
        self.finished = threading.Event()
        self.tables = 0
        self.restoring_seen = 0

    def run(self) -> None:
        from airflow_stateful_provider.streams import fetch_application_status, render_status_table

        last = None
        while not self.finished.wait(0.3):
            try:
                status = fetch_application_status(self.bootstrap_servers, self.application_id)
            except Exception:  # noqa: BLE001 - not published yet
                continue
            table = render_status_table(status)
            shape = [(t.task_id, t.state, t.active and t.active.instance_id, t.restoration,
                      [(s.instance_id, s.lag) for s in t.standbys]) for t in status.tasks]
            if shape != last:
                last = shape
                self.tables += 1
                self.restoring_seen += len(status.restoring_tasks)
                print(f"\n---- status of {self.application_id} at {time.strftime('%H:%M:%S')}\n{table}", flush=True)


def stop_application(bootstrap_servers: str, application_id: str) -> None:
    from airflow_stateful_provider import cli

    out = io.StringIO()
    code = cli.main(["stop", application_id, "--bootstrap-servers", bootstrap_servers, "--timeout", "120"], out=out)
    print(out.getvalue().rstrip())
    if code != 0:
        raise SystemExit(f"error: stateful-streams stop exited {code}")


def driver_logs(application_id: str) -> set[Path]:
    return set(Path(tempfile.gettempdir(), "stateful-streams").glob(f"{application_id}-*.log"))


def driver_finished(application_id: str, after: set[Path]) -> dict:
    """The supervisor's final event from the driver log of the latest submission."""
    from tools.spark_app import read_events

    logs = driver_logs(application_id) - after
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for log in logs:
            finished = read_events(log, "supervisor_finished")
            if finished:
                return finished[0]
        time.sleep(0.5)
    raise SystemExit(f"error: the driver of {application_id} did not finish; logs: {sorted(logs)}")


def main() -> int:
    AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    step("Starting a local Kafka broker (KRaft, loopback)")
    try:
        broker = LocalKafkaBroker(work_dir=LOCAL / "demo-kafka").start()
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    servers = broker.bootstrap_servers
    os.environ["AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT"] = json.dumps({"conn_type": "stateful_streams", "host": servers})
    app_id = f"demo-{int(time.time())}"
    running = False
    try:
        print(f"    broker {servers} up in {broker.start_seconds:.1f}s (log {broker.log_path})")
        step(f"Migrating the Airflow metadata database in {AIRFLOW_HOME}")
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                       stdout=subprocess.DEVNULL)

        conf = {"application_id": app_id, "topic_prefix": f"{app_id}-", **DATA}
        step(f"DAG stateful_pipeline: generate {DATA['clicks']} clicks / {DATA['payments']} payments, submit "
             f"{app_id} to Spark local[3,2] (2 instances, 1 standby each), wait for restoration and standby lag")
        running = True
        run_dag("stateful_pipeline.py", "stateful_pipeline", conf)

        step("Restart: stop the application, submit it again over the same data; the new instances restore "
             "their stores from the changelogs (status while they restore)")
        before = driver_logs(app_id)
        stop_application(servers, app_id)
        print(f"    driver finished: exit code {driver_finished(app_id, set()).get('exit_code')}")
        printer = StatusPrinter(servers, app_id)
        printer.start()
        try:
            run_dag("stateful_pipeline.py", "stateful_pipeline", {**conf, "generate": False})
        finally:
            printer.finished.set()
            printer.join(5)
        print(f"    ({printer.tables} status table(s) printed; {printer.restoring_seen} task(s) seen restoring)")

        step("A sample of the outputs")
        from airflow_stateful_provider.examples.expected import read_outputs

        outputs = read_outputs(servers, sessions_topic=f"{app_id}-user-sessions",
                               payments_usd_topic=f"{app_id}-payments-usd")
        print(f"    {len(outputs.sessions)} closed sessions, {len(outputs.payments_usd)} payments priced in USD")
        for key, session in sorted(outputs.sessions.items())[:3]:
            print(f"    session {key}: {session}")
        for payment_id, payment in sorted(outputs.payments_usd.items())[:3]:
            print(f"    payment {payment_id}: {payment}")

        step("DAG store_maintenance (online): retention, compaction, changelog config check")
        run_dag("store_maintenance.py", "store_maintenance", {"application_id": app_id, "mode": "online"})

        step(f"Clean stop: stateful-streams stop {app_id}")
        stop_application(servers, app_id)
        running = False
        finished = driver_finished(app_id, before)
        print(f"    driver finished: exit code {finished['exit_code']}, instances "
              f"{sorted((finished.get('instances') or {}))}")
        return 0 if finished["exit_code"] == 0 else 1
    finally:
        if running:
            try:
                stop_application(servers, app_id)
            except BaseException as exc:  # noqa: BLE001 - best effort on the way out
                print(f"    could not stop {app_id}: {exc}", file=sys.stderr)
        broker.stop()
        print("\n==> Broker stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
