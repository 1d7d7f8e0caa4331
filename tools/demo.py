"""`make demo`: the example stateful pipeline end to end on this machine, told in short.

1. a local Kafka broker (KRaft, loopback) and an Airflow metadata database (SQLite under
   ``.local/airflow``; DAGs run with ``dag.test()``);
2. the ``stateful_pipeline`` DAG: generated clicks, payments and currency rates; the example
   topology submitted to Spark ``local[3,2]`` (``--spark-master spark://...``: a standalone
   cluster, e.g. ``make spark-cluster-start``'s) as 2 supervised instances with a standby of
   every task; the restoration and standby-lag sensors; what the topology produced;
3. an instance killed (SIGKILL of its Python worker): the supervisor restarts it with a
   higher epoch while the group moves its tasks;
4. a restart as a new Spark application over the same data: executor-local state is gone,
   so every task restores its stores from the changelogs, drawn as a live progress bar
   from the status topic (what ``stateful-streams status`` and the sensor read);
5. the standbys' lag;
6. the ``store_maintenance`` DAG on data that is really stale (the generated traffic happened
   more than a day ago, beyond the sessions' one-day retention): what retention dropped and
   compaction reclaimed, then a session store restored from its changelog (cut-off marker
   included) agreeing with the maintained active;
7. a clean stop (``stateful-streams stop``) and a summary.

It exits non-zero when a step fails or when no task was seen restoring with progress.
The terminal gets the story; everything else the demo's process prints (Airflow's task
logs, the report task's tables, third-party loggers at WARNING) goes to ``.local/demo.log``;
``--verbose`` shows all of it, at INFO, on the terminal. The broker is stopped on exit, and the
application too after a failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCAL = REPO_ROOT / ".local"
AIRFLOW_HOME = LOCAL / "airflow"
LOG = LOCAL / "demo.log"

os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO_ROOT / "dags")
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}"
LOCAL_MASTER = "local[3,2]"
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from tools.kafka.broker import BrokerError, LocalKafkaBroker  # noqa: E402 - after AIRFLOW_HOME is set

DATA = {"users": 20_000, "clicks": 200_000, "payments": 20_000}
#: The generated traffic ends this long ago: older than the sessions' one-day retention, so
#: step 6's maintenance has really stale data to drop (and younger than the session
#: changelogs' retention.ms, retention + 1 day, so the restore in step 4 finds all of it).
DATA_AGE_HOURS = 26
STEPS = 7


class Story:
    """Numbered steps and indented detail lines; a progress line that redraws in place on a
    terminal and is printed at most every few seconds elsewhere."""

    def __init__(self) -> None:
        self.number = 0
        # A copy of the terminal's stdout: file descriptors 1 and 2 go to the log (into_log).
        self.out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
        self.tty = self.out.isatty()
        self._progress_at = 0.0
        self._progress_open = False

    def step(self, title: str) -> None:
        self.end_progress()
        self.number += 1
        print(f"\n[{self.number}/{STEPS}] {title}", file=self.out, flush=True)

    def say(self, text: str) -> None:
        self.end_progress()
        print(f"      {text}", file=self.out, flush=True)

    def progress(self, text: str, *, final: bool = False) -> None:
        if self.tty:
            print(f"\r      {text}\033[K", end="", file=self.out, flush=True)
            self._progress_open = True
        elif final or time.monotonic() - self._progress_at >= 2.0:
            print(f"      {text}", file=self.out, flush=True)
            self._progress_at = time.monotonic()
        if final:
            self.end_progress()

    def error(self, text: str) -> None:
        self.end_progress()
        print(f"error: {text}", file=self.out, flush=True)

    def end_progress(self) -> None:
        if self._progress_open:
            print(file=self.out, flush=True)
            self._progress_open = False


class RestorationWatch(threading.Thread):
    """Reads the application's status as on-call does (the status topic plus live end
    offsets) and draws restoration as one bar: offsets restored / offsets to restore over
    every restoration run seen, the summed restore rate and the ETA of the owners'
    documents. A run is one task restoring on one owner from one start offset; a task that
    moves while restoring (the group rebalances as instances join) starts a new run, and
    the run it left counts with what it restored."""

    def __init__(self, story: Story, servers: str, application_id: str) -> None:
        super().__init__(daemon=True, name="restoration-watch")
        self.story, self.servers, self.application_id = story, servers, application_id
        self.stopping = threading.Event()
        #: (task id, owner, start offset) -> [restored, total] of the run's latest document
        self.runs: dict[tuple[str, str, int], list[int]] = {}
        self.first_seen: float | None = None
        self.last_seen: float | None = None
        self.peak_rate = 0.0

    def run(self) -> None:
        from airflow_stateful_provider.streams import StreamsError, fetch_application_status

        while not self.stopping.wait(0.1):
            try:
                status = fetch_application_status(self.servers, self.application_id, timeout_ms=5_000)
            except StreamsError:
                continue  # no document yet, or between two applications
            current = {(t.task_id, t.active.instance_id, sum(c.start_offset for c in t.restoration.changelogs)):
                       t.restoration for t in status.restoring_tasks
                       if t.active is not None and t.restoration is not None and not t.restoration.pending}
            running_on = {t.task_id: t.active.instance_id for t in status.tasks
                          if t.state == "running" and t.active is not None}
            for (task_id, owner, start), run in self.runs.items():
                if (task_id, owner, start) in current:
                    continue
                if running_on.get(task_id) == owner:
                    run[0] = run[1]  # completed: its task runs where it restored
                else:
                    run[1] = run[0]  # left (the task moved on): counts with what it restored
            for key, r in current.items():
                self.runs[key] = [r.restored, r.total]
            if current:
                now = time.monotonic()
                self.first_seen = self.first_seen or now
                self.last_seen = now
                rate = sum(r.rate for r in current.values())
                self.peak_rate = max(self.peak_rate, rate)
                self.story.progress(self.line(len(current), rate))

    def line(self, restoring: int, rate: float) -> str:
        from airflow_stateful_provider.streams import progress_bar

        restored, total = self.restored, self.total
        remaining = total - restored
        eta = "-" if remaining == 0 else ("?" if rate <= 0 else f"{remaining / rate:.0f}s")
        return (f"{progress_bar(restored / total if total else 1.0)} {restored:,}/{total:,} offsets restored, "
                f"{restoring} task(s) restoring, {rate:,.0f}/s, ETA {eta}")

    @property
    def tasks(self) -> set[str]:
        return {task_id for task_id, _, _ in self.runs}

    @property
    def restored(self) -> int:
        return sum(restored for restored, _ in self.runs.values())

    @property
    def total(self) -> int:
        return sum(total for _, total in self.runs.values())

    def finish(self) -> None:
        self.stopping.set()
        self.join(10)
        if self.runs:
            self.story.progress(self.line(0, 0.0), final=True)


# ---------------------------------------------------------------------------- Airflow


@contextlib.contextmanager
def into_log(verbose: bool):
    """File descriptors 1 and 2 (Airflow's task logs, prints of the DAG's tasks, logs and
    warnings) go to LOG for the duration, unless verbose."""
    if verbose:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(LOG, "a", encoding="utf-8") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def run_dag(story: Story, file: str, dag_id: str, conf: dict):
    from airflow.dag_processing.dagbag import DagBag

    began = time.monotonic()
    bag = DagBag(dag_folder=REPO_ROOT / "dags" / file)
    if bag.import_errors:
        raise SystemExit(f"DAG import errors: {bag.import_errors}")
    run = bag.get_dag(dag_id).test(run_conf=conf)
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    if run.state != "success":
        raise SystemExit(f"DAG {dag_id} ended {run.state}: {states} (see {LOG})")
    story.say(f"DAG {dag_id}: success in {time.monotonic() - began:.0f}s ({', '.join(states)})")
    return run


def return_values(run) -> dict:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, key="return_value")).all()
        return {row.task_id: XComModel.deserialize_value(row) for row in rows}


# ---------------------------------------------------------------------------- the application


def status(servers: str, app_id: str):
    from airflow_stateful_provider.streams import fetch_application_status

    return fetch_application_status(servers, app_id, timeout_ms=10_000)


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception:  # noqa: BLE001 - the status may be unreadable for a moment
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def stop_application(servers: str, app_id: str) -> None:
    from airflow_stateful_provider import cli

    out = io.StringIO()
    code = cli.main(["stop", app_id, "--bootstrap-servers", servers, "--timeout", "120", "--json"], out=out)
    if code != 0:
        raise SystemExit(f"stateful-streams stop exited {code}: {out.getvalue()}")


def driver_logs(app_id: str) -> set[Path]:
    return set(Path(tempfile.gettempdir(), "stateful-streams").glob(f"{app_id}-*.log"))


def driver_events(app_id: str, kind: str, logs: set[Path] | None = None) -> list[dict]:
    from tools.spark_app import read_events

    return [e for log in sorted(logs if logs is not None else driver_logs(app_id)) for e in read_events(log, kind)]


def kill_instance(story: Story, servers: str, app_id: str) -> None:
    """SIGKILL one instance's Python worker. Spark re-runs its task (``local[3,2]``: 2
    attempts) or the supervisor resubmits it; either way it starts again at a higher epoch
    (fencing the old one) while the group hands its tasks to the other instance."""
    victim = f"{app_id}-1"
    before = status(servers, app_id).instance(victim)
    killed_at = time.monotonic()
    os.kill(before.pid, signal.SIGKILL)
    story.say(f"SIGKILL to {victim} (epoch {before.epoch}, Python worker pid {before.pid})")

    def back_and_running():
        now = status(servers, app_id)
        instance = now.instance(victim)
        return now if (instance.epoch > before.epoch and instance.state == "RUNNING" and not instance.stale
                       and all(t.state == "running" for t in now.tasks)) else None

    after = wait_for(back_and_running, 180, f"{victim} to run again")
    restarts = driver_events(app_id, "instance_restarting")
    how = "the supervisor resubmitted it" if restarts else "Spark re-ran its task"
    actives = {i.instance_id: len(i.active_tasks) for i in after.instances}
    story.say(f"{how}: {victim} running again at epoch {after.instance(victim).epoch} after "
              f"{time.monotonic() - killed_at:.0f}s; active tasks per instance {actives}, "
              f"all {len(after.tasks)} running")


def caught_up_outputs(servers: str, app_id: str):
    """The example's outputs once the application has committed every record of its input
    and repartition topics: waited for while its committed offsets move (a busy machine is
    slower, not a failure), given up after a minute without progress."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    from airflow_stateful_provider.examples.clicks_and_payments import ExampleSettings
    from airflow_stateful_provider.examples.expected import read_outputs
    from tools.kafka.topics import read_committed_offsets
    from tools.waits import wait_progressing

    names = ExampleSettings()
    admin = KafkaAdminClient(bootstrap_servers=servers)
    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    try:
        topics = [f"{app_id}-{t}" for t in (names.clicks_topic, names.payments_topic, names.rates_topic)]
        topics += [t for t in consumer.topics() if t.startswith(f"{app_id}-") and t.endswith("-repartition")]
        partitions = [TopicPartition(t, p) for t in topics for p in (consumer.partitions_for_topic(t) or ())]

        committed: dict[str, dict[int, int]] = {}

        def caught_up() -> bool:
            ends = consumer.end_offsets(partitions)
            committed.update({t: read_committed_offsets(admin, app_id, t) for t in topics})
            return all(committed[tp.topic].get(tp.partition, 0) >= end for tp, end in ends.items())

        try:
            wait_progressing(caught_up, lambda: sum(sum(offsets.values()) for offsets in committed.values()),
                             "the application to process every input record", measure="committed offsets",
                             interval=0.5)
        except AssertionError as exc:
            raise SystemExit(str(exc)) from None
    finally:
        consumer.close()
        admin.close()
    return read_outputs(servers, sessions_topic=f"{app_id}-{names.sessions_topic}",
                        payments_usd_topic=f"{app_id}-{names.payments_usd_topic}")


def standby_lag_line(servers: str, app_id: str) -> str:
    now = status(servers, app_id)
    with_standby = [t for t in now.tasks if t.standbys]
    known = [s.lag for t in with_standby for s in t.standbys if s.lag is not None]
    return (f"each of the {len(with_standby)} stateful tasks has a standby on the other instance "
            f"({len(now.tasks) - len(with_standby)} stateless tasks need none); lag max "
            f"{max(known) if known else '?'} offsets (the sensor's bound: 1,000)")


def size_text(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"


def maintenance_lines(results: dict) -> list[str]:
    lines = []
    rows = results.get("enforce_retention") or []
    retention = [row.get("result") or {} for row in rows]
    dropped = sum(len(r.get("segments_dropped") or []) for r in retention)
    actives = [row.get("result") or {} for row in rows if row.get("role") == "active"]
    lines.append(f"retention: {dropped} expired segment(s) dropped from {len(retention)} store cop(ies) "
                 f"(the traffic ended {DATA_AGE_HOURS} h ago; the example keeps sessions a day)")
    lines.append(f"  active copies: {sum(r.get('rows_dropped') or 0 for r in actives):,} row(s) dropped "
                 f"(sessions; version rows), segments "
                 f"{sum(r.get('segments_before') or 0 for r in actives)} -> "
                 f"{sum(r.get('segments_after') or 0 for r in actives)}, "
                 f"{size_text(sum(r.get('bytes_before') or 0 for r in actives))} -> "
                 f"{size_text(sum(r.get('bytes_after') or 0 for r in actives))} on disk, "
                 f"{sum(r.get('changelog_records_written') or 0 for r in actives)} changelog record(s) "
                 f"written (a tombstone per dropped session, a cut-off marker per store)")
    compact = [row.get("result") or {} for row in results.get("compact") or []]
    before = sum(r.get("bytes_before") or 0 for r in compact)
    after = sum(r.get("bytes_after") or 0 for r in compact)
    lines.append(f"compaction: {len(compact)} store cop(ies) rewritten, "
                 f"{size_text(before)} -> {size_text(after)} on disk (reclaimed {size_text(max(before - after, 0))})")
    check = results.get("check_changelog_configs") or {}
    lines.append(f"changelog configs: {len(check.get('checked_topics') or [])} internal topic(s) checked, "
                 f"{len(check.get('drift') or [])} drifting setting(s) found (dry run)")
    return lines


def restored_agreement(servers: str, app_id: str, rows: list[dict]) -> tuple[bool, ...]:
    """Restore the sessions store of the active task that dropped the most from its changelog
    partition (read_committed, cut-off marker included) into a fresh store, as a new instance
    on an empty disk would; it must hold what the maintained active holds (its live segments,
    stream time). Also what the same restore without the marker would bring back."""
    from airflow_stateful_provider.examples.clicks_and_payments import SESSIONS_STORE, ExampleSettings
    from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
    from airflow_stateful_provider.streams.state.common.cutoff import SESSION_CUTOFF_KEY
    from airflow_stateful_provider.streams.state.session.rocksdb import RocksDBSessionStore
    from tools.kafka.topics import read_all

    actives = [r for r in rows if r.get("role") == "active" and r.get("store") == SESSIONS_STORE]
    if not actives:
        return False, f"no active copy of {SESSIONS_STORE} answered the retention run"
    row = max(actives, key=lambda r: len((r.get("result") or {}).get("segments_dropped") or []))
    result = row["result"]
    partition = int(row["task_id"].split("_")[1])
    topic = f"{app_id}-{SESSIONS_STORE}-changelog"
    records = [ChangelogRecord(r.key, r.value, r.timestamp, r.offset)
               for r in read_all(servers, topic) if r.partition == partition]
    retention = ExampleSettings().sessions_retention_ms

    def restore(path: str, batch: list) -> tuple[int, int, int]:
        store = RocksDBSessionStore(path, retention, name=SESSIONS_STORE)
        try:
            for at in range(0, len(batch), 10_000):
                store.restore_batch(batch[at:at + 10_000])
            stats = store.stats()
            return len(store.all()), len(stats.live_segments), store.observed_stream_time
        finally:
            store.close()

    with tempfile.TemporaryDirectory(prefix="demo-restore-") as scratch:
        sessions, segments, observed = restore(os.path.join(scratch, "with"), records)
        without = restore(os.path.join(scratch, "without"), [r for r in records if r.key != SESSION_CUTOFF_KEY])
    markers = sum(r.key == SESSION_CUTOFF_KEY for r in records)
    agrees = segments == result.get("segments_after") and observed == result.get("observed_stream_time_after")
    return (agrees,
            f"restored task {row['task_id']}'s {SESSIONS_STORE} from its changelog on an empty disk "
            f"({len(records):,} records, {markers} cut-off marker): {sessions:,} session(s) in {segments} live "
            f"segment(s), stream time {observed}",
            f"  the maintained active: {result.get('segments_after')} live segment(s), stream time "
            f"{result.get('observed_stream_time_after')}: {'agrees' if agrees else 'DISAGREES'}; without the "
            f"marker the restore would have brought back {without[0]:,} dropped session(s)")


# ---------------------------------------------------------------------------- main


def quiet_logs(verbose: bool) -> None:
    """Third-party loggers at WARNING unless --verbose (before Airflow is imported)."""
    level = "INFO" if verbose else "WARNING"
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", level)
    logging.basicConfig(level=getattr(logging, level), format="%(levelname)s %(name)s: %(message)s")
    for name in ("kafka", "py4j", "airflow"):
        logging.getLogger(name).setLevel(getattr(logging, level))
    if not verbose:
        # Airflow's in-process API client (dag.test()) warns about its own httpx use.
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verbose", action="store_true", help="show Airflow, Spark and Kafka client logs")
    parser.add_argument("--spark-master", default=LOCAL_MASTER,
                        help=f"where the topology runs (default {LOCAL_MASTER}); e.g. the spark://127.0.0.1:<port> "
                             f"that `make spark-cluster-start` prints (client deploy mode)")
    args = parser.parse_args(argv)
    use_spark_master(args.spark_master)
    quiet_logs(args.verbose)
    story = Story()
    AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    LOG.write_text("")
    print(f"airflow-stateful-provider demo (details in {LOG.relative_to(REPO_ROOT)}; --verbose shows them here)",
          file=story.out, flush=True)
    try:
        with into_log(args.verbose):
            return run(story, args.verbose, args.spark_master)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            story.error(exc.code)
            return 1
        raise


def use_spark_master(master: str) -> None:
    """``spark_default`` for the DAG: the embedded master, or a standalone one in client mode."""
    if master.startswith("spark://"):
        host, _, port = master.rpartition(":")
        connection = {"conn_type": "spark", "host": host, "port": int(port), "extra": {"deploy-mode": "client"}}
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver on loopback, like the local cluster
    else:
        connection = {"conn_type": "spark", "host": master}
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(connection)



def run(story: Story, verbose: bool, spark_master: str) -> int:
    began = time.monotonic()
    story.step("Kafka broker and Airflow")
    try:
        broker = LocalKafkaBroker(work_dir=LOCAL / "demo-kafka").start()
    except BrokerError as exc:
        story.error(str(exc))
        return 1
    servers = broker.bootstrap_servers
    os.environ["AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT"] = json.dumps({"conn_type": "stateful_streams", "host": servers})
    app_id = f"demo-{int(time.time())}"
    running = False
    try:
        story.say(f"broker {servers} up in {broker.start_seconds:.1f}s (KRaft, loopback)")
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                       stdout=subprocess.DEVNULL, stderr=None if verbose else subprocess.DEVNULL)
        story.say(f"Airflow metadata database ready ({AIRFLOW_HOME})")

        conf = {"application_id": app_id, "topic_prefix": f"{app_id}-", "data_age_hours": DATA_AGE_HOURS, **DATA}
        story.step(f"Submit the topology: {DATA['clicks']:,} clicks and {DATA['payments']:,} payments, "
                   f"{app_id} on Spark {spark_master}")
        story.say("DAG stateful_pipeline: generate data -> SubmitTopologyOperator (2 instances, 1 standby each) "
                  "-> RestorationSensor -> StandbyLagSensor -> report")
        running = True
        run_dag(story, "stateful_pipeline.py", "stateful_pipeline", conf)
        outputs = caught_up_outputs(servers, app_id)
        story.say(f"processed every input record: {len(outputs.sessions):,} click sessions closed, "
                  f"{len(outputs.payments_usd):,} payments priced in USD as of their time, e.g.")
        for key, session in sorted(outputs.sessions.items())[:1]:
            story.say(f"  session {key}: {session}")
        for payment_id, payment in sorted(outputs.payments_usd.items())[:1]:
            story.say(f"  payment {payment_id}: {payment}")

        story.step("Kill an instance")
        kill_instance(story, servers, app_id)

        story.step("Restart as a new Spark application: every task restores its state from the changelogs")
        first_logs = driver_logs(app_id)
        stop_application(servers, app_id)
        story.say("stopped cleanly (stateful-streams stop); executor-local state went with the Spark application")
        watch = RestorationWatch(story, servers, app_id)
        watch.start()
        try:
            # Restoring this state takes under a second here: the instances publish their status
            # every 100 ms (not every second) so that the restoration is seen, and drawn, while it runs.
            run_dag(story, "stateful_pipeline.py", "stateful_pipeline",
                    {**conf, "generate": False, "status_interval_ms": 100})
        finally:
            watch.finish()
        if not watch.total:
            story.error("no task was seen restoring with progress")
            return 1
        seconds = (watch.last_seen or 0) - (watch.first_seen or 0)
        story.say(f"{len(watch.tasks)} task(s) restored {watch.restored:,} changelog offsets in {len(watch.runs)} "
                  f"run(s) (a task moved by a rebalance restarts); seen restoring for {seconds:.1f}s, "
                  f"peak {watch.peak_rate:,.0f} offsets/s")

        story.step("Standby lag")
        story.say(standby_lag_line(servers, app_id))

        story.step(f"Store maintenance on really stale data (the traffic ended {DATA_AGE_HOURS} h ago)")
        maintenance = run_dag(story, "store_maintenance.py", "store_maintenance",
                              {"application_id": app_id, "mode": "online"})
        results = return_values(maintenance)
        for line in maintenance_lines(results):
            story.say(line)
        restored = restored_agreement(servers, app_id, results.get("enforce_retention") or [])
        for line in restored[1:]:
            story.say(line)
        if not restored[0]:
            story.error("the store restored from the changelog does not agree with the maintained active")
            return 1

        story.step("Clean stop")
        stop_application(servers, app_id)
        running = False
        finished = wait_for(lambda: driver_events(app_id, "supervisor_finished", driver_logs(app_id) - first_logs),
                            120, "the driver to finish")[0]
        story.say(f"stateful-streams stop {app_id}: driver exit code {finished['exit_code']}")
        print(f"\nDone in {time.monotonic() - began:.0f}s: pipeline submitted twice, one instance killed and "
              f"restarted, {watch.restored:,} offsets restored with progress, maintenance applied, stopped cleanly.",
              file=story.out)
        return 0 if finished["exit_code"] == 0 else 1
    finally:
        story.end_progress()
        if running:
            try:
                stop_application(servers, app_id)
            except BaseException as exc:  # noqa: BLE001 - best effort on the way out
                story.error(f"could not stop {app_id}: {exc}")
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
