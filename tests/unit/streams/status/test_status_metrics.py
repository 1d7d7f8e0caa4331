"""Metrics in the status document (threads, task activity, input lag, snapshots, the hosting
application), what the snapshot derives from them, and their Prometheus families: the
scrape endpoint's and an instance's own endpoint's, read back with prometheus_client's parser."""

from __future__ import annotations

import enum
import socket
import threading
import urllib.request
from types import SimpleNamespace

import pytest
from kafka import TopicPartition as KafkaTopicPartition
from kafka.consumer.subscription_state import SubscriptionState
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from airflow_stateful_provider.streams.errors import ConfigError, StatusFormatError
from airflow_stateful_provider.streams.kafka.positions import local_lag
from airflow_stateful_provider.streams.status.application import build_application_status
from airflow_stateful_provider.streams.status.collector import RestoreRateTracker, status_document_from_instance
from airflow_stateful_provider.streams.status.document import InstanceStatus
from airflow_stateful_provider.streams.status.metric_families import StatusReading, metric_families
from airflow_stateful_provider.streams.status.metrics_endpoint import InstanceMetricsEndpoint
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition
from tests.unit.streams.status.status_documents import NOW_MS, changelog, document, task

APP = "clicks"
INPUT = "clicks-in"


class State(enum.Enum):
    RUNNING = "RUNNING"


def consumer_at(positions: dict[int, tuple[int | None, int | None]]) -> SimpleNamespace:
    """A consumer whose subscription state (kafka-python's own class) holds ``partition ->
    (position, high watermark)``."""
    subscription = SubscriptionState()
    subscription.assign_from_user([KafkaTopicPartition(INPUT, p) for p in positions])
    for p, (position, highwater) in positions.items():
        if position is not None:
            subscription.seek(KafkaTopicPartition(INPUT, p), position)
        subscription.assignment[KafkaTopicPartition(INPUT, p)].highwater = highwater
    return SimpleNamespace(_subscription=subscription,
                           group_metadata=lambda: SimpleNamespace(generation_id=3))


def test_local_lag_reads_position_and_high_watermark_without_the_network():
    consumer = consumer_at({0: (40, 100), 1: (None, 7)})
    assert local_lag(consumer, INPUT, 0) == (40, 100)
    assert local_lag(consumer, INPUT, 1) == (None, 7)  # awaiting its first position
    assert local_lag(consumer, INPUT, 9) == (None, None)  # not assigned


def instance(consumer, *, process_total=0, commit=(None, None), polls=(None, None), uploaded=None, waiting=None,
             processed_at=None):
    """A KafkaStreams, as status/instance_view.py describes it, with one running task reading
    partitions 0 and 1 of the input topic."""
    task_metrics = SimpleNamespace(process_total=process_total, dropped_records={"deserialization": 2, "late": 1})
    active = SimpleNamespace(state=State.RUNNING, metrics=task_metrics,
                             partitions=[TopicPartition(INPUT, 0), TopicPartition(INPUT, 1)])
    thread_metrics = SimpleNamespace(
        process_total=process_total, commit_total=4, transaction_aborts_total=1, processed_at=processed_at,
        commit_latency=SimpleNamespace(avg_max=lambda: commit), poll_records=SimpleNamespace(avg_max=lambda: polls))
    thread = SimpleNamespace(
        name="clicks-1-StreamThread-1", tasks={TaskId(0, 0): active}, standby_tasks={}, tasks_lock=threading.RLock(),
        changelog_reader=SimpleNamespace(progress=lambda: [], restore_sources={}, lost_tasks={}),
        consumer=consumer, next_probing_rebalance_ms=None, metrics=thread_metrics,
        snapshot_taker=SimpleNamespace(last_uploaded=uploaded or {}), kafka_waits=SimpleNamespace(current=waiting))
    return SimpleNamespace(state=State.RUNNING, threads=[thread], process_id="uuid-1",
                           metrics_endpoint="http://worker-1:9464/metrics",
                           config=SimpleNamespace(application_id=APP, processing_guarantee="exactly_once_v2",
                                                  host_application={"kind": "spark", "application_id": "app-1",
                                                                    "ui_url": "http://driver:4040"}))


def test_the_collector_reports_thread_metrics_task_activity_and_input_lag():
    tracker = RestoreRateTracker()
    consumer = consumer_at({0: (40, 100), 1: (7, 7)})
    status_document_from_instance(instance(consumer, process_total=1_000), "clicks-1", 1, now_ms=NOW_MS,
                                  rate_tracker=tracker)
    raw = status_document_from_instance(
        instance(consumer, process_total=1_500, commit=(12.0, 30.0), polls=(250.0, 500.0),
                 uploaded={"0_0": ("1700-abc", NOW_MS - 60_000)}),
        "clicks-1", 1, now_ms=NOW_MS + 2_000, rate_tracker=tracker)
    doc = InstanceStatus.from_dict(raw, key="clicks-1")
    (thread,) = doc.threads
    assert (thread.thread_id, thread.process_total, thread.process_rate, thread.commit_total) == \
        ("clicks-1-StreamThread-1", 1_500, 250.0, 4)
    assert (thread.commit_latency_avg, thread.commit_latency_max, thread.poll_records_avg, thread.poll_records_max) \
        == (12.0, 30.0, 250.0, 500.0)
    assert (thread.records_lag_max, thread.transaction_aborts_total) == (60, 1)
    (active,) = doc.tasks
    assert (active.process_total, active.process_rate) == (1_500, 250.0)
    assert [(p.partition, p.position, p.end_offset, p.lag) for p in active.input_partitions] == \
        [(0, 40, 100, 60), (1, 7, 7, 0)]
    assert active.last_snapshot.snapshot_id == "1700-abc"
    assert doc.host_application.ui_url == "http://driver:4040"
    assert doc.metrics_endpoint == "http://worker-1:9464/metrics"
    assert doc.format_version == 1  # optional fields: readers of version 1 read the rest
    assert InstanceStatus.from_json_bytes(doc.to_json_bytes(), key="clicks-1") == doc


def test_a_thread_with_no_known_lag_and_no_samples_says_so():
    doc = InstanceStatus.from_dict(status_document_from_instance(instance(consumer_at({0: (None, None)})),
                                                                 "clicks-1", 1, now_ms=NOW_MS), key="clicks-1")
    (thread,) = doc.threads
    assert (thread.records_lag_max, thread.commit_latency_avg, thread.poll_records_max) == (None, None, None)
    assert doc.tasks[0].input_partitions[0].lag is None


def test_documents_without_the_optional_fields_still_parse():
    doc = InstanceStatus.from_dict(document("i-1", task("0_0")), key="i-1")
    assert (doc.threads, doc.host_application, doc.metrics_endpoint) == ((), None, None)
    assert (doc.tasks[0].process_total, doc.tasks[0].input_partitions, doc.tasks[0].last_snapshot) == (None, (), None)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["threads"][0].update(process_rate=-1), "threads[0].process_rate' must be a finite number >= 0"),
    (lambda d: d["threads"][0].update(commit_latency_avg="slow"), "threads[0].commit_latency_avg"),
    (lambda d: d["threads"][0].pop("thread_id"), "threads[0].thread_id' is missing"),
    (lambda d: d["tasks"][0]["input_partitions"][0].update(position="x"), "tasks[0].input_partitions[0].position"),
    (lambda d: d["host_application"].update(ui_url=3), "host_application.ui_url"),
    (lambda d: d.update(metrics_endpoint=""), "metrics_endpoint"),
])
def test_malformed_metrics_name_the_field(mutate, message):
    raw = status_document_from_instance(instance(consumer_at({0: (1, 2), 1: (1, 2)})), "clicks-1", 1, now_ms=NOW_MS)
    mutate(raw)
    with pytest.raises(StatusFormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        InstanceStatus.from_dict(raw, key="clicks-1")


def snapshot():
    """Two instances: i-1 runs 0_0 (processing, lagging on one partition) and restores 0_1;
    i-2 keeps a standby of 0_0 and has a snapshot of it."""
    i1 = document("i-1", task("0_0"), task("0_1", "active", "restoring", changelog(1, 0, 400, 1_000, rate=200.0)))
    i1["tasks"][0].update(process_total=5_000, process_rate=120.5,
                          dropped_records={"deserialization": 2, "late": 3},
                          input_partitions=[{"topic": INPUT, "partition": 0, "position": 90, "end_offset": 100}])
    i1["threads"] = [{"thread_id": "i-1-StreamThread-1", "process_total": 5_000, "process_rate": 120.5,
                      "commit_total": 9, "commit_latency_avg": 4.0, "commit_latency_max": 9.0,
                      "poll_records_avg": 50.0, "poll_records_max": 80.0, "records_lag_max": 10,
                      "transaction_aborts_total": 2}]
    i2 = document("i-2", task("0_0", "standby", "running", changelog(0, 0, 700, 750, rate=35.0)))
    i2["tasks"][0]["last_snapshot"] = {"snapshot_id": "s-1", "taken_at": NOW_MS - 90_000}
    docs = [InstanceStatus.from_dict(d, key=d["instance_id"]) for d in (i1, i2)]
    return build_application_status(docs, {(f"{APP}-counts-changelog", 0): 800}, NOW_MS, application_id=APP)


def test_the_snapshot_carries_input_lag_update_rate_and_the_newest_snapshot():
    status = snapshot()
    running, restoring = status.task("0_0"), status.task("0_1")
    assert (running.process_total, running.input_lag) == (5_000, 10)
    assert running.standbys[0].update_rate == 35.0 and running.standbys[0].lag == 100
    assert running.newest_snapshot.snapshot_id == "s-1"
    assert restoring.input_lag is None  # its owner reports no input partitions
    assert status.instance("i-1").threads[0].transaction_aborts_total == 2
    task_json = next(t for t in status.to_json_dict()["tasks"] if t["task_id"] == "0_0")
    assert task_json["input_lag"] == 10 and task_json["input_partitions"][0]["lag"] == 10


def samples(families) -> dict[tuple[str, tuple], float]:
    """``(sample name, sorted labels) -> value`` of families, through the OpenMetrics text."""
    class Families:
        def collect(self):
            return iter(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metric_families_use_kafka_streams_names_and_levels():
    got = samples(metric_families([StatusReading(APP, snapshot(), labels={"conn_id": "kafka_prod"})],
                                  now_ms=NOW_MS))
    base = (("application_id", APP), ("conn_id", "kafka_prod"))
    thread = tuple(sorted((*base, ("instance_id", "i-1"), ("thread_id", "i-1-StreamThread-1"))))
    assert got[("kafka_streams_stream_thread_metrics_process_total", thread)] == 5_000
    assert got[("kafka_streams_stream_thread_metrics_process_rate", thread)] == 120.5
    assert got[("kafka_streams_stream_thread_metrics_commit_latency_avg", thread)] == 4.0
    assert got[("kafka_streams_stream_thread_metrics_commit_latency_max", thread)] == 9.0
    assert got[("kafka_streams_stream_thread_metrics_poll_records_avg", thread)] == 50.0
    assert got[("kafka_consumer_consumer_fetch_manager_metrics_records_lag_max", thread)] == 10
    assert got[("stateful_streams_transaction_aborts_total", thread)] == 2
    task0 = tuple(sorted((*base, ("instance_id", "i-1"), ("task_id", "0_0"))))
    task1 = tuple(sorted((*base, ("instance_id", "i-1"), ("task_id", "0_1"))))
    assert got[("kafka_streams_stream_task_metrics_process_total", task0)] == 5_000
    assert got[("kafka_streams_stream_task_metrics_dropped_records_total",
                tuple(sorted((*task0, ("reason", "late")))))] == 3
    assert got[("kafka_streams_stream_task_metrics_skipped_records_total", task0)] == 2  # deserialization only
    assert got[("kafka_streams_stream_task_metrics_restore_rate", task1)] == 200.0
    assert got[("kafka_streams_stream_task_metrics_restore_remaining_records_total", task1)] == 600
    assert got[("stateful_streams_restoration_eta_seconds", task1)] == 3.0
    assert got[("kafka_consumer_consumer_fetch_manager_metrics_records_lag",
                tuple(sorted((*task0, ("topic", INPUT), ("partition", "0")))))] == 10
    standby = tuple(sorted((*base, ("instance_id", "i-2"), ("role", "standby"), ("task_id", "0_0"))))
    assert got[("kafka_streams_stream_task_metrics_update_rate", standby)] == 35.0
    assert got[("stateful_streams_standby_lag_records", standby)] == 100
    assert got[("stateful_streams_snapshot_age_seconds", tuple(sorted((*base, ("task_id", "0_0")))))] == 90.0
    assert got[("stateful_streams_tasks", tuple(sorted((*base, ("state", "restoring")))))] == 1
    assert got[("stateful_streams_tasks", tuple(sorted((*base, ("state", "unassigned")))))] == 0
    assert got[("stateful_streams_status_up", base)] == 1
    assert got[("stateful_streams_instance_state", tuple(sorted((*base, ("instance_id", "i-2"),
                                                                 ("state", "RUNNING")))))] == 1


def test_an_unreadable_application_is_status_up_zero():
    got = samples(metric_families([StatusReading("gone", None, "unknown application")], now_ms=NOW_MS))
    assert got == {("stateful_streams_status_up", (("application_id", "gone"),)): 0}


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def test_an_instance_serves_its_last_document_on_its_own_endpoint():
    published: list[InstanceStatus] = []
    endpoint = InstanceMetricsEndpoint(APP, 0, lambda: published[-1] if published else None, address="127.0.0.1")
    url = endpoint.start()
    try:
        port = url.rsplit(":", 1)[1].split("/")[0]
        local = f"http://127.0.0.1:{port}/metrics"
        assert "stateful_streams_status_up{application_id=\"clicks\"} 0.0" in fetch(local)
        published.append(InstanceStatus.from_dict(
            status_document_from_instance(instance(consumer_at({0: (40, 100), 1: (7, 7)}), process_total=77),
                                          "clicks-1", 1), key="clicks-1"))
        text = fetch(local)
        assert 'kafka_streams_stream_task_metrics_process_total{application_id="clicks",instance_id="clicks-1",' \
               'task_id="0_0"} 77.0' in text
        assert 'kafka_consumer_consumer_fetch_manager_metrics_records_lag_max{application_id="clicks",' \
               'instance_id="clicks-1",thread_id="clicks-1-StreamThread-1"} 60.0' in text
    finally:
        endpoint.close()


def test_a_metrics_port_in_use_is_a_config_error_naming_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"metrics_port {port}: cannot listen on 127.0.0.1"):
            InstanceMetricsEndpoint(APP, port, lambda: None, address="127.0.0.1").start()


def test_a_thread_blocked_in_a_kafka_call_is_shown_and_fails_the_health_check_after_the_bound():
    from airflow_stateful_provider.streams.processing.kafka_waits import KafkaWait
    from airflow_stateful_provider.streams.status.health import STALLED_AFTER_MS, application_health
    from airflow_stateful_provider.streams.status.rendering import render_status_table

    consumer = consumer_at({0: (40, 100), 1: (7, 7)})
    wait = KafkaWait("commit_transaction", "the transaction coordinator, broker 2", NOW_MS - 20_000)

    def status_at(now_ms: int, waiting: KafkaWait | None, processed_at: float | None):
        raw = status_document_from_instance(instance(consumer, process_total=10, waiting=waiting,
                                                     processed_at=processed_at), "clicks-1", 1, now_ms=now_ms)
        doc = InstanceStatus.from_dict(raw, key="clicks-1")
        return doc, build_application_status([doc], {}, now_ms, application_id=APP)

    doc, status = status_at(NOW_MS, wait, (NOW_MS - 20_000) / 1000)
    (thread,) = doc.threads
    assert (thread.blocked_in, thread.blocked_on, thread.blocked_ms, thread.unprocessed_ms) == \
        ("commit_transaction", "the transaction coordinator, broker 2", 20_000, 20_000)
    assert application_health(status).healthy  # 20 s: under the bound
    table = render_status_table(status)
    assert (f"clicks-1-StreamThread-1 (clicks-1@{doc.host}): 20s in commit_transaction, waiting for the transaction "
            "coordinator, broker 2") in table

    later = NOW_MS - 20_000 + STALLED_AFTER_MS
    _, status = status_at(later, wait, (NOW_MS - 20_000) / 1000)
    verdict = application_health(status)
    assert not verdict.healthy
    assert verdict.problems == (f"thread clicks-1-StreamThread-1 of instance clicks-1@{doc.host} has waited 30s in "
                                "commit_transaction for the transaction coordinator, broker 2 "
                                "(docs/failure-handling.md, \"A stalled thread\")",)
    got = samples(metric_families([StatusReading(APP, status)], now_ms=later))
    assert [value for (name, _), value in got.items() if name == "stateful_streams_blocked_seconds"] == [30.0]

    # not blocked, but nothing processed for the bound while 60 records wait
    _, status = status_at(later, None, (NOW_MS - 20_000) / 1000)
    assert application_health(status).problems == (
        f"thread clicks-1-StreamThread-1 of instance clicks-1@{doc.host} has processed nothing for 30s while its input "
        "waits (60 records)",)
    # processing again: healthy
    _, status = status_at(later, None, (later - 1_000) / 1000)
    assert application_health(status).healthy
