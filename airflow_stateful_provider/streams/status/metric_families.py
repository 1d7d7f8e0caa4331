"""Prometheus metric families of application status snapshots (OpenMetrics text via
``prometheus_client``), with Kafka Streams' metric names and levels where they exist.

A Kafka Streams application exported with Prometheus' JMX exporter has metrics named
``kafka_streams_<group>_<metric>`` (``stream-thread-metrics``, ``stream-task-metrics``) and
its consumers ``kafka_consumer_consumer_fetch_manager_metrics_<metric>``; dashboards and
alerts written for those work here. What Kafka Streams does not have (instance staleness,
standby lag against the live changelog end, snapshot age, transaction aborts, task states)
is named ``stateful_streams_*``. docs/runbook.md lists every metric and its labels.

Both the scrape endpoint of the Airflow plugin (every application of every connection) and an
instance's own endpoint (its last document, StreamsConfig.metrics_port) render these
families, from :class:`~.application.ApplicationStatus` snapshots: one code path, one set of
names. Every family's label names are fixed; ``base_labels`` (e.g. the Airflow connection)
come first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from airflow_stateful_provider.streams.status.application import ApplicationStatus, InstanceSummary, TaskStatus
from airflow_stateful_provider.streams.status.document import STALE, TASK_STATES, UNASSIGNED

__all__ = ["ERROR_HANDLER_REASONS", "StatusReading", "metric_families"]

THREAD = "kafka_streams_stream_thread_metrics_"
TASK = "kafka_streams_stream_task_metrics_"
CONSUMER = "kafka_consumer_consumer_fetch_manager_metrics_"
OWN = "stateful_streams_"

#: Dropped-record reasons that an exception handler skipped (a ``continue`` answer to a
#: failure): ``skipped-records-total``, Kafka Streams' name before KIP-444 folded every reason
#: into ``dropped-records``. The other reasons (late, null key) are drops by design.
ERROR_HANDLER_REASONS = frozenset({"deserialization", "processing", "punctuation", "production",
                                   "invalid-timestamp"})

#: Every task state the snapshot knows: ``stateful_streams_tasks`` has a sample for each, 0 included.
SNAPSHOT_TASK_STATES = (*TASK_STATES, STALE, UNASSIGNED)


@dataclasses.dataclass(frozen=True)
class StatusReading:
    """One application's snapshot, or why it could not be read; ``labels`` identify it
    (``application_id`` is added)."""

    application_id: str
    status: ApplicationStatus | None
    error: str | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


class _Families:
    """The families of one scrape, created on first use with their fixed label names."""

    def __init__(self, base: Sequence[str]) -> None:
        self.base = tuple(base)
        self.families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}

    def add(self, kind: str, name: str, documentation: str, labels: Sequence[str], base_values: Sequence[str],
            values: Sequence[str], value: float | None) -> None:
        if value is None:
            return
        family = self.families.get(name)
        if family is None:
            labelled = [*self.base, *labels]
            family = self.families[name] = (CounterMetricFamily(name, documentation, labels=labelled)
                                            if kind == "counter" else
                                            GaugeMetricFamily(name, documentation, labels=labelled))
        family.add_metric([*base_values, *values], float(value))


def metric_families(readings: Iterable[StatusReading], *, now_ms: int) -> list[Metric]:
    """The families of ``readings`` (see the module docstring); ``now_ms`` ages snapshots."""
    readings = list(readings)
    base = ["application_id", *sorted({k for r in readings for k in r.labels})]
    out = _Families(base)
    for reading in readings:
        values = [reading.application_id, *(reading.labels.get(k, "") for k in base[1:])]
        out.add("gauge", OWN + "status_up", "1 when the application's status topic was read, 0 when not (the "
                "error is logged by the reader)", (), values, (), 0 if reading.status is None else 1)
        if reading.status is not None:
            _application(out, values, reading.status, now_ms)
    return list(out.families.values())


def _application(out: _Families, base: list[str], status: ApplicationStatus, now_ms: int) -> None:
    out.add("gauge", OWN + "live_instances", "Instances whose last status document is fresh (0: stopped or gone)",
            (), base, (), sum(not i.stale for i in status.instances))
    for instance in status.instances:
        _instance(out, base, instance)
    counts = {state: 0 for state in SNAPSHOT_TASK_STATES}
    for task in status.tasks:
        counts[task.state] = counts.get(task.state, 0) + 1
        _task(out, base, task, now_ms)
    for state, count in counts.items():
        out.add("gauge", OWN + "tasks", "Tasks of the application by state (stale: only a stale instance claims "
                "it; unassigned: nobody does; state_lost: refused, docs/runbook.md)", ("state",), base, (state,),
                count)


def _instance(out: _Families, base: list[str], i: InstanceSummary) -> None:
    ids = (i.instance_id,)
    out.add("gauge", OWN + "instance_status_age_seconds", "Age of the instance's last status document",
            ("instance_id",), base, ids, i.age_ms / 1000)
    out.add("gauge", OWN + "instance_stale", "1 when the instance's last status document is older than the "
            "staleness bound: its claims are not trusted", ("instance_id",), base, ids, int(i.stale))
    out.add("gauge", OWN + "instance_state", "1 for the instance's KafkaStreams state", ("instance_id", "state"),
            base, (*ids, i.state), 1)
    out.add("gauge", OWN + "instance_epoch", "Restarts of the instance id by its supervisor", ("instance_id",),
            base, ids, i.epoch)
    for t in i.threads:
        labels = ("instance_id", "thread_id")
        values = (i.instance_id, t.thread_id)
        out.add("counter", THREAD + "process_total", "Records the thread processed", labels, base, values,
                t.process_total)
        out.add("gauge", THREAD + "process_rate", "Records the thread processed per second", labels, base, values,
                t.process_rate)
        out.add("counter", THREAD + "commit_total", "Commits of the thread", labels, base, values, t.commit_total)
        out.add("gauge", THREAD + "commit_latency_avg", "Average commit time in ms over the last 30 s", labels, base,
                values, t.commit_latency_avg)
        out.add("gauge", THREAD + "commit_latency_max", "Longest commit time in ms over the last 30 s", labels, base,
                values, t.commit_latency_max)
        out.add("gauge", THREAD + "poll_records_avg", "Average records per non-empty poll over the last 30 s", labels,
                base, values, t.poll_records_avg)
        out.add("gauge", THREAD + "poll_records_max", "Most records in one poll over the last 30 s", labels, base,
                values, t.poll_records_max)
        out.add("gauge", CONSUMER + "records_lag_max", "Largest input lag in records of the thread's partitions, "
                "as of the instance's last document", labels, base, values, t.records_lag_max)
        out.add("counter", OWN + "transaction_aborts_total", "Transactions the thread aborted (exactly-once; its "
                "tasks went back to their last commit)", labels, base, values, t.transaction_aborts_total)
        out.add("gauge", OWN + "blocked_seconds", "How long the thread has waited in one Kafka call, as of the "
                "instance's last document (0: in none)", labels, base, values,
                0 if t.blocked_ms is None else t.blocked_ms / 1000)


def _task(out: _Families, base: list[str], t: TaskStatus, now_ms: int) -> None:
    owner = "" if t.active is None else t.active.instance_id
    labels = ("task_id", "instance_id")
    values = (t.task_id, owner)
    out.add("counter", TASK + "process_total", "Records the task processed since it started on its instance",
            labels, base, values, t.process_total)
    out.add("gauge", TASK + "process_rate", "Records the task processed per second", labels, base, values,
            t.process_rate)
    if t.process_total is not None or t.dropped_records:
        for reason, count in sorted(t.dropped_records.items()):
            out.add("counter", TASK + "dropped_records_total", "Records the task dropped, by reason",
                    (*labels, "reason"), base, (*values, reason), count)
        out.add("counter", TASK + "skipped_records_total", "Records an exception handler skipped (deserialization, "
                "processing, punctuation, production, invalid timestamp)", labels, base, values,
                sum(c for r, c in t.dropped_records.items() if r in ERROR_HANDLER_REASONS))
    if t.restoration is not None:
        out.add("gauge", TASK + "restore_rate", "Changelog offsets restored per second", labels, base, values,
                t.restoration.rate)
        out.add("gauge", TASK + "restore_remaining_records_total", "Changelog offsets the restoration still has "
                "to read", labels, base, values, t.restoration.remaining)
        out.add("gauge", OWN + "restoration_eta_seconds", "Time to the end of the restoration at the current rate",
                labels, base, values, t.restoration.eta_seconds)
    for p in t.input_partitions:
        out.add("gauge", CONSUMER + "records_lag", "Records between the task's input position and the "
                "partition's end", (*labels, "topic", "partition"), base, (*values, p.topic, str(p.partition)), p.lag)
    for s in t.standbys:
        replica = ("task_id", "instance_id", "role")
        replica_values = (t.task_id, s.instance_id, "warmup" if s.warmup else "standby")
        out.add("gauge", TASK + "update_rate", "Changelog offsets a standby applied per second", replica, base,
                replica_values, s.update_rate)
        out.add("gauge", OWN + "standby_lag_records", "Changelog offsets a standby is behind the live end", replica,
                base, replica_values, s.lag)
    if t.newest_snapshot is not None:
        out.add("gauge", OWN + "snapshot_age_seconds", "Age of the task's newest known snapshot", ("task_id",), base,
                (t.task_id,), max(0, now_ms - t.newest_snapshot.taken_at) / 1000)
