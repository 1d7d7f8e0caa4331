"""The Grafana dashboard in docs/grafana/ queries metrics the scrape endpoint renders, and
shows each metric docs/runbook.md promises on-call."""

from __future__ import annotations

import json
import re
from pathlib import Path

from airflow_stateful_provider.streams.status.metric_families import StatusReading, metric_families
from tests.unit.streams.status.status_documents import NOW_MS
from tests.unit.streams.status.test_status_metrics import APP, samples, snapshot

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "stateful-streams.json"
#: The plugin's own family (plugins/web.py), beside the families of the snapshots.
CONNECTION_UP = "stateful_streams_connection_up"


def expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def queried_metrics() -> set[str]:
    return {name for e in expressions() for name in re.findall(r"\b((?:kafka|stateful_streams)_[a-z_]+)\b", e)}


def test_every_queried_metric_is_rendered_by_the_scrape_endpoint():
    rendered = {name for name, _ in samples(metric_families(
        [StatusReading(APP, snapshot(), labels={"conn_id": "kafka_prod"})], now_ms=NOW_MS))}
    unknown = queried_metrics() - rendered - {CONNECTION_UP}
    assert not unknown, f"the dashboard queries metrics nobody exports: {sorted(unknown)}"


def test_the_dashboard_shows_the_metrics_on_call_starts_from():
    wanted = {f"kafka_streams_stream_thread_metrics_{m}" for m in (
        "process_rate", "commit_latency_avg", "commit_latency_max", "poll_records_avg")} | {
        "kafka_consumer_consumer_fetch_manager_metrics_records_lag_max",
        "kafka_streams_stream_task_metrics_restore_rate",
        "kafka_streams_stream_task_metrics_restore_remaining_records_total",
        "kafka_streams_stream_task_metrics_update_rate",
        "kafka_streams_stream_task_metrics_dropped_records_total",
        "kafka_streams_stream_task_metrics_skipped_records_total",
        "stateful_streams_transaction_aborts_total", "stateful_streams_snapshot_age_seconds",
        "stateful_streams_standby_lag_records", "stateful_streams_live_instances"}
    assert wanted <= queried_metrics(), sorted(wanted - queried_metrics())


def test_every_query_is_filtered_by_the_dashboards_variables():
    for expr in expressions():
        if "label_values(stateful_streams_status_up, conn_id)" in expr:
            continue  # the first variable lists the connections
        assert 'conn_id=~"$conn_id"' in expr, expr
