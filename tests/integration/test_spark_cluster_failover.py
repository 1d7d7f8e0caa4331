"""The example pipeline on a real Spark standalone cluster (a Master and two Workers on
loopback, tools/spark_cluster.py) while its executors and Workers die.

spark-submit runs the application in client mode against ``spark://127.0.0.1:<port>`` with
executors of one task slot each, two instances under exactly-once with one standby each.
The input goes in three waves; during the first an **executor JVM** running an instance is
SIGKILLed, during the second the **Worker JVM** that hosts an instance (and so all its
executors). Each time the instance's Python process dies with its executor, Spark reruns its
task on the capacity left (a new executor, a new state directory: the instance restores from
the changelogs) with a higher epoch, and its active tasks move to the other instance's
standbys meanwhile (``acceptable_recovery_lag=0``: an empty store is never caught up).

Asserted: each victim comes back RUNNING with a new epoch on another executor (after the
Worker kill: on the surviving Worker), and its status document shows tasks restored from
the changelogs (source ``changelog``, records > 0); the survivor's standbys became active
while the victim was gone; every input and repartition record is committed; and the outputs, read
``read_committed``, equal the oracle of the input key by key (0 missing, 0 duplicated, 0
wrong).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest

from airflow_stateful_provider.streams.errors import UnknownApplicationError
from airflow_stateful_provider.streams.status.reader import read_status_documents
from tests.integration.crash_harness import (
    TOPOLOGY,
    App,
    BackgroundOracle,
    OffsetWatch,
    Timeline,
    Workload,
    split_input,
    wait_for_app,
    wait_fully_consumed,
    wait_no_open_transactions,
)
from tests.integration.output_verdict import compare_outputs, json_value, payment_key, read_topic, session_key
from tools.spark_app import SparkApplication
from tools.waits import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

WORKLOAD = Workload(seed=2718, users=300, clicks=9_000, payments=2_000, partitions=4)
INSTANCES = 2
#: one task slot per executor, so an instance's executor can be killed alone; two slots in all,
#: so the Master spreads the two executors over the two Workers and a dead executor's
#: replacement goes where cores are free. With spare executors (4 slots) a rerun instance could
#: land beside the other one, and the Worker kill then took both: no survivor to take over.
EXECUTORS = {"spark.executor.cores": "1", "spark.cores.max": str(INSTANCES), "spark.executor.memory": "512m",
             "spark.driver.memory": "512m"}


class StatusWatch(threading.Thread):
    """Reads the application's status documents every half second and keeps every snapshot."""

    def __init__(self, bootstrap_servers: str, application_id: str) -> None:
        super().__init__(name="status-watch", daemon=True)
        self.bootstrap_servers, self.application_id = bootstrap_servers, application_id
        self.snapshots: list[tuple[float, dict]] = []
        self._closing = threading.Event()

    def run(self) -> None:
        while not self._closing.wait(0.5):
            try:
                documents = read_status_documents(self.bootstrap_servers, self.application_id)
            except UnknownApplicationError:
                continue
            self.snapshots.append((time.monotonic(), documents))

    def latest(self) -> dict:
        return self.snapshots[-1][1] if self.snapshots else {}

    def since(self, moment: float) -> list[dict]:
        return [documents for at, documents in self.snapshots if at >= moment]

    def close(self) -> None:
        self._closing.set()
        self.join(10)


class SparkRun:
    """What wait_fully_consumed needs of the instances: are they running, and their logs."""

    def __init__(self, application: SparkApplication, cluster) -> None:
        self.application, self.cluster = application, cluster

    def check_running(self) -> None:
        self.application.check_running()

    def restored_records(self) -> int:
        """0: the instances on the cluster write no events file; their committed offsets are
        the progress (restorations after the kills are waited for on their own)."""
        return 0

    def logs(self) -> str:
        return (f"driver log:\n{self.application.log_tail(60)}\n"
                f"executor logs:\n{self.cluster.executor_logs(25)}")


def active_tasks(document) -> set[str]:
    return {t.task_id for t in document.tasks if t.role == "active"}


def standby_tasks(document) -> set[str]:
    """The tasks ``document``'s instance keeps a replica of: standbys, and warmups (standbys
    the assignor is moving tasks with); either is promoted when the active goes away."""
    return {t.task_id for t in document.tasks if t.role in ("standby", "warmup")}


def restored_from_changelog(document, epoch: int) -> dict[str, int]:
    """Task -> changelog records restored, of the tasks ``document`` (of run ``epoch``) says it
    restored from the changelogs alone."""
    if document is None or document.epoch != epoch:
        return {}
    return {t.task_id: t.restore.changelog_records for t in document.tasks
            if t.restore is not None and t.restore.source == "changelog" and t.restore.changelog_records > 0}


def test_instances_survive_a_killed_executor_and_a_killed_worker(spark_cluster, bootstrap_servers, tmp_path):
    timeline = Timeline()
    app = App(f"cluster-{uuid.uuid4().hex[:8]}", WORKLOAD)
    settings = app.settings
    ids = [f"{app.application_id}-{i}" for i in range(INSTANCES)]
    now_ms = int(time.time() * 1000)
    oracle = BackgroundOracle(WORKLOAD, now_ms)
    rates, waves = split_input(WORKLOAD.records(now_ms), 3)
    app.create_topics(bootstrap_servers)
    watch = OffsetWatch(bootstrap_servers, app)
    application = SparkApplication(TOPOLOGY, {
        "application_id": app.application_id,
        "bootstrap_servers": bootstrap_servers,
        "processing_guarantee": "exactly_once_v2",
        "num_standby_replicas": 1,
        "acceptable_recovery_lag": 0,
        "probing_rebalance_interval_ms": 60_000,
        "commit_interval_ms": 1000,
        "status_interval_ms": 500,
        "windowed_aggregation_emit_interval_ms": 0,
        "app_configs": app.app_configs,
        "consumer_configs": {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 1_500},
    }, tmp_path, instances=INSTANCES, master=spark_cluster.master_url, name=app.application_id,
        spark_conf=EXECUTORS)
    run = SparkRun(application, spark_cluster)
    status = StatusWatch(bootstrap_servers, app.application_id)

    def context() -> str:
        return f"timeline:\n{timeline}\n{run.logs()}"

    def all_running(min_epochs: dict[str, int] | None = None) -> bool:
        application.check_running()
        documents = status.latest()
        return sorted(documents) == ids and all(
            d.state == "RUNNING" and d.epoch >= (min_epochs or {}).get(i, 1) for i, d in documents.items())

    def kill(victim_id: str, what: str) -> dict:
        """Once the other instance keeps a replica of one of ``victim_id``'s active tasks (after
        a restart the group needs a rebalance or two to give it one), SIGKILL the executor or
        the Worker under ``victim_id``; wait until it runs again."""
        def covered() -> bool:
            documents = status.latest()
            others = [d for i, d in documents.items() if i != victim_id]
            return victim_id in documents and bool(others) and bool(
                standby_tasks(others[0]) & active_tasks(documents[victim_id]))

        wait_until(covered, 120, f"the other instance to keep a replica of one of {victim_id}'s active tasks",
                   lambda: f"{status.latest()}\n{context()}", interval=0.5)
        before = status.latest()
        victim = before[victim_id]
        survivor = next(d for i, d in before.items() if i != victim_id)
        executor = spark_cluster.executor_of(victim.pid)
        target = executor if what == "executor" else spark_cluster.worker_of(victim.pid)
        assert spark_cluster.worker_of(survivor.pid) != spark_cluster.worker_of(victim.pid), (
            f"both instances run on Worker {spark_cluster.worker_of(victim.pid)}: killing {what} {target} "
            f"would leave no survivor\n{context()}")
        killed_at = time.monotonic()
        os.kill(target, signal.SIGKILL)
        timeline.add(f"SIGKILL {what} {target} running {victim_id} (epoch {victim.epoch}, pid {victim.pid}, "
                     f"executor {executor})")
        wait_until(lambda: all_running({victim_id: victim.epoch + 1}), 120,
                   f"{victim_id} to run again after its {what} was killed", context, interval=0.5)
        after = status.latest()[victim_id]
        timeline.add(f"{victim_id} RUNNING again: epoch {after.epoch}, pid {after.pid}")
        # on a new executor its state directory is empty: status shows its tasks restored from the changelogs
        wait_until(lambda: restored_from_changelog(status.latest().get(victim_id), after.epoch), 60,
                   f"{victim_id}'s status to show its tasks restored from the changelogs",
                   lambda: f"its tasks: {status.latest().get(victim_id)}\n{context()}", interval=0.5)
        restored = restored_from_changelog(status.latest()[victim_id], after.epoch)
        timeline.add(f"{victim_id} restored from the changelogs: {restored}")
        # the survivor's standbys took over the victim's active tasks while it was gone
        took_over = set().union(*(active_tasks(d[survivor.instance_id]) for d in status.since(killed_at)
                                  if survivor.instance_id in d)) & standby_tasks(survivor) & active_tasks(victim)
        return {"victim": victim, "after": after, "took_over": took_over, "restored": restored, "new_executor":
                spark_cluster.executor_of(after.pid), "old_executor": executor, "killed": target}

    try:
        application.start()
        status.start()
        wait_until(all_running, 180, "both instances RUNNING on the cluster", context, interval=0.5)
        timeline.add(f"instances RUNNING: { {i: d.pid for i, d in status.latest().items()} }")
        app.produce(bootstrap_servers, rates)
        wait_for_app(watch, run, lambda: not watch.unconsumed(settings.rates_topic), "every rate committed", context)

        app.produce(bootstrap_servers, waves[0])
        wait_for_app(watch, run, lambda: watch.committed_total([settings.clicks_topic]) >= 500,
                     "the first clicks committed", context, interval=0.25)
        executor_kill = kill(ids[0], "executor")

        app.produce(bootstrap_servers, waves[1])
        victim = ids[1]
        worker_kill = kill(victim, "worker")
        dead_worker = worker_kill["killed"]
        surviving = {p.pid for p in spark_cluster.workers} - {dead_worker}
        # every instance now runs on the Worker left
        hosts = {i: spark_cluster.worker_of(d.pid) for i, d in status.latest().items()}
        timeline.add(f"instances by Worker after the Worker kill: {hosts}")

        app.produce(bootstrap_servers, waves[2])
        wait_fully_consumed(watch, run, timeline)
        application.terminate_driver()
        code = application.wait(150)
        assert code == 0, f"spark-submit exited with {code}\n{context()}"
        timeline.add("application stopped")

        wait_no_open_transactions(watch, settings.output_topics, 30)
        sessions = read_topic(bootstrap_servers, settings.sessions_topic, session_key, json_value)
        payments = read_topic(bootstrap_servers, settings.payments_usd_topic, payment_key, json_value)
        expected = oracle.result()
    finally:
        status.close()
        application.kill()
        watch.close()
        oracle.close()
    print(f"\ntimeline:\n{timeline}")

    for outcome in (executor_kill, worker_kill):
        assert outcome["new_executor"] != outcome["old_executor"], (outcome, context())
        assert outcome["took_over"], (f"no standby of the survivor became active while {outcome['victim'].instance_id} "
                                      f"was gone: {outcome}\n{context()}")
    assert set(hosts.values()) <= surviving, (hosts, dead_worker, context())

    verdicts = [compare_outputs(settings.sessions_topic, expected.sessions, sessions, exact=True, sessions=True),
                compare_outputs(settings.payments_usd_topic, expected.payments, payments, exact=True,
                                sessions=False)]
    problems = [text for v in verdicts for text in (v.examples(v.missing, "missing keys"),
                                                   v.examples(v.unexpected, "keys the oracle does not have"),
                                                   v.examples(v.duplicated, "keys written more than once"),
                                                   v.examples(v.wrong_any, "keys with a wrong value")) if text]
    assert len(expected.payments) == WORKLOAD.payments
    assert not problems, "\n".join([*(v.summary() for v in verdicts), *problems, f"timeline:\n{timeline}"])
