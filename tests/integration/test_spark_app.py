"""The example pipeline on Spark (spark-submit, ``local[3,1]``): two supervised instances with
standbys process the generated data exactly; SIGKILL of one instance's Python worker makes the
supervisor restart it with a higher epoch while its tasks fail over to the other instance's
standbys; ``stateful-streams stop`` drains both and the driver exits 0 with checkpoints written."""

from __future__ import annotations

import io
import os
import signal
import uuid
from pathlib import Path

import pytest

from airflow_stateful_provider import cli
from airflow_stateful_provider.examples.clicks_and_payments import (
    JOIN_NAME,
    RATES_STORE,
    SESSIONS_STORE,
    ExampleSettings,
)
from airflow_stateful_provider.examples.expected import expected_payments_usd, expected_sessions, read_outputs
from airflow_stateful_provider.examples.generator import RATE, ensure_topics, generate, produce
from airflow_stateful_provider.streams.status.reader import fetch_application_status, read_status_documents
from airflow_stateful_provider.streams.topology.store_builders import changelog_topic_name
from tools.kafka.topics import committed_offsets, end_offsets
from tools.spark_app import SparkApplication
from tools.waits import wait_progressing, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

TOPOLOGY = "airflow_stateful_provider.examples.clicks_and_payments:build_topology"
PARTITIONS = 4
#: Longer than the session timeout, so the group moves the killed instance's tasks to the
#: standbys before the supervisor brings it back.
BACKOFF_S = 10


def test_example_on_spark_survives_a_killed_worker_and_stops_cleanly(bootstrap_servers, tmp_path):
    app_id = f"spark-example-{uuid.uuid4().hex[:6]}"
    settings = ExampleSettings(clicks_topic=f"{app_id}-clicks", payments_topic=f"{app_id}-payments",
                               rates_topic=f"{app_id}-rates", sessions_topic=f"{app_id}-sessions",
                               payments_usd_topic=f"{app_id}-payments-usd")
    app_configs = {name: getattr(settings, name) for name in
                   ("clicks_topic", "payments_topic", "rates_topic", "sessions_topic", "payments_usd_topic")}
    ensure_topics(bootstrap_servers, settings.input_topics + settings.output_topics, PARTITIONS)
    records = generate(seed=7, users=60, clicks=2000, payments=400)
    rates = [r for r in records if r.kind == RATE]
    others = [r for r in records if r.kind != RATE]
    first, second = others[: len(others) // 2], others[len(others) // 2:]
    state_dir = tmp_path / "state"
    config = {"application_id": app_id, "bootstrap_servers": bootstrap_servers, "state_dir": str(state_dir),
              "commit_interval_ms": 100, "status_interval_ms": 300, "num_standby_replicas": 1,
              "windowed_aggregation_emit_interval_ms": 0, "consumer_configs": {"session_timeout_ms": 6_000},
              "app_configs": app_configs}
    app = SparkApplication(TOPOLOGY, config, tmp_path, instances=2, master="local[3,1]",
                           extra_args=["--initial-backoff", str(BACKOFF_S)]).start()
    instance_0, instance_1 = f"{app_id}-0", f"{app_id}-1"
    repartition = f"{app_id}-{JOIN_NAME}-left-repartition"

    def caught_up(*topics: str) -> bool:
        app.check_running()
        for topic in topics:
            committed = committed_offsets(bootstrap_servers, app_id, topic)
            if any(committed.get(p, 0) < end for p, end in end_offsets(bootstrap_servers, topic).items()):
                return False
        return True

    def committed_total() -> int:
        """Progress: the offsets committed on every topic the group reads."""
        return sum(sum(committed_offsets(bootstrap_servers, app_id, topic).values())
                   for topic in (*settings.input_topics, repartition))

    def wait_caught_up(what: str, *topics: str) -> None:
        wait_progressing(lambda: caught_up(*topics), committed_total, what, measure="committed offsets",
                         context=app.log_tail, interval=0.5)

    def documents() -> dict:
        return read_status_documents(bootstrap_servers, app_id, allow_empty=True)

    try:
        def settled() -> bool:
            app.check_running()
            try:
                status = fetch_application_status(bootstrap_servers, app_id)
            except Exception:  # noqa: BLE001 - nothing published yet
                return False
            return (len(status.tasks) == 3 * PARTITIONS
                    and all(t.active is not None and t.state == "running" for t in status.tasks)
                    and {t.active.instance_id for t in status.tasks} == {instance_0, instance_1}
                    and sum(1 for t in status.tasks if len(t.standbys) == 1) == 2 * PARTITIONS)

        wait_until(settled, 120, "12 running tasks over both instances, 8 with a standby", app.log_tail, interval=0.5)
        stateful_tasks = [t.task_id for t in fetch_application_status(bootstrap_servers, app_id).tasks if t.standbys]
        produce(bootstrap_servers, rates, rates_topic=settings.rates_topic, partitions=PARTITIONS)
        wait_caught_up("the rates committed", settings.rates_topic)
        produce(bootstrap_servers, first, clicks_topic=settings.clicks_topic, payments_topic=settings.payments_topic,
                partitions=PARTITIONS)
        wait_caught_up("the first half committed", settings.clicks_topic, settings.payments_topic, repartition)

        killed = documents()[instance_1]
        assert killed.epoch == 1
        os.kill(killed.pid, signal.SIGKILL)
        failed = app.wait_for_event("instance_failed", 60, lambda e: e["instance_id"] == instance_1)
        assert failed["epoch"] == 1
        restarting = app.wait_for_event("instance_restarting", 10, lambda e: e["instance_id"] == instance_1)
        assert restarting["epoch"] == 2 and restarting["backoff_s"] == BACKOFF_S

        # Meanwhile the group moves every task to instance 0 (the standbys take over) ...
        def failed_over() -> bool:
            app.check_running()
            doc = documents().get(instance_0)
            return doc is not None and sum(1 for t in doc.tasks if t.role == "active") == 3 * PARTITIONS
        wait_until(failed_over, BACKOFF_S + 20, "instance 0 active for all 12 tasks", app.log_tail, interval=0.3)
        assert not app.events("instance_started") or all(
            e["epoch"] == 1 for e in app.events("instance_started")), "restarted before the failover"
        produce(bootstrap_servers, second, clicks_topic=settings.clicks_topic, payments_topic=settings.payments_topic,
                partitions=PARTITIONS)

        # ... and the supervisor brings instance 1 back with epoch 2, which rejoins.
        app.wait_for_event("instance_started", 60, lambda e: e["instance_id"] == instance_1 and e["epoch"] == 2)

        def rejoined() -> bool:
            doc = documents().get(instance_1)
            return doc is not None and doc.epoch == 2 and doc.state == "RUNNING" and doc.pid != killed.pid
        wait_until(rejoined, 90, "instance 1 running again with epoch 2", app.log_tail, interval=0.5)
        wait_caught_up("everything committed", settings.clicks_topic, settings.payments_topic, repartition)
        outputs = read_outputs(bootstrap_servers, sessions_topic=settings.sessions_topic,
                               payments_usd_topic=settings.payments_usd_topic)
        changelog_ends = {f"{sub}_{p}": end for sub, store in ((0, SESSIONS_STORE), (1, RATES_STORE))
                          for p, end in end_offsets(bootstrap_servers, changelog_topic_name(app_id, store)).items()}

        out = io.StringIO()
        assert cli.main(["stop", app_id, "--bootstrap-servers", bootstrap_servers, "--timeout", "120"],
                        out=out) == 0, out.getvalue()
        assert app.wait(120) == 0, app.log_tail()
        finished = app.wait_for_event("supervisor_finished", 5)
        assert finished["exit_code"] == 0 and finished["cancelled"] == [] and finished["error"] is None
        stopped = {e["instance_id"]: e["epoch"] for e in app.events("instance_stopped")}
        assert stopped == {instance_0: 1, instance_1: 2}
        assert documents() == {}  # both removed their status documents (clean stop)
    finally:
        app.kill()

    expected = expected_sessions(records, partitions=PARTITIONS)
    assert len(expected) > 300
    assert outputs.sessions == expected
    assert outputs.payments_usd == expected_payments_usd(records, partitions=PARTITIONS)
    # Both holders of every stateful task with changelog records wrote a checkpoint (a task
    # whose store never saw a record, e.g. a rates partition no currency hashes to, has none).
    with_records = [task for task in stateful_tasks if changelog_ends[task] > 0]
    assert len(with_records) >= PARTITIONS
    checkpointed = sorted(p.parent.name for p in Path(state_dir).glob(f"*/{app_id}/*/.checkpoint"))
    assert checkpointed == sorted(with_records * 2), (checkpointed, changelog_ends)
