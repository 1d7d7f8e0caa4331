"""Standbys catch up with a large changelog while the actives restore (docs/semantics.md §2), across
instance processes on a real broker.

Regression: the restore consumer pauses standby partitions while actives restore; pausing a
partition whose fetched batch kafka-python had returned only in part left that rest parked
in the consumer for good, and the standby stalled at that offset forever, with no error.
"""

from __future__ import annotations

import uuid

import pytest

from airflow_stateful_provider.streams.status.reader import fetch_application_status
from tools.changelog_state import fill_counts_changelog
from tools.instances import InstanceProcess
from tools.kafka.topics import create_topics
from tools.waits import wait_progressing

pytestmark = pytest.mark.kafka

PARTITIONS = 4
RECORDS = 600_000


def test_every_standby_catches_up_with_a_large_changelog(bootstrap_servers, tmp_path):
    app = f"standby-catch-up-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {f"{app}-in": PARTITIONS, f"{app}-out": PARTITIONS})
    ends = fill_counts_changelog(bootstrap_servers, app, PARTITIONS, RECORDS)
    assert ends == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}

    def config(name: str) -> dict:
        return {"application_id": app, "bootstrap_servers": bootstrap_servers, "state_dir": str(tmp_path / name),
                "instance_id": name, "num_standby_replicas": 1, "commit_interval_ms": 500,
                "status_interval_ms": 300, "consumer_configs": {"session_timeout_ms": 10_000},
                "app_configs": {"input": f"{app}-in", "output": f"{app}-out"}}

    instances = [InstanceProcess("tests.integration.topologies:configured_counts", config(name), tmp_path, name)
                 for name in ("instance-0", "instance-1")]
    last: list = []

    def caught_up() -> bool:
        for instance in instances:
            instance.check_alive()
        try:
            status = fetch_application_status(bootstrap_servers, app)
        except Exception:  # noqa: BLE001 - no document published yet
            return False
        last[:] = [status]
        return len(status.tasks) == PARTITIONS and all(
            t.state == "running" and t.active is not None and len(t.standbys) == 1
            and t.standbys[0].instance_id != t.active.instance_id and t.standbys[0].lag == 0
            for t in status.tasks)

    def context() -> str:
        tasks = "" if not last else "\n".join(
            f"{t.task_id} {t.state} active={t.active and t.active.instance_id} standbys="
            f"{[(s.instance_id, s.lag, s.lag_basis) for s in t.standbys]}" for t in last[0].tasks)
        return tasks + "\n" + "\n".join(instance.log_tail(15) for instance in instances)

    try:
        for instance in instances:
            instance.start()
        waited = wait_progressing(caught_up, lambda: sum(i.restored_records(standbys=True) for i in instances),
                                  "every task running with one caught-up standby",
                                  measure="changelog records restored and applied by standbys", context=context)
        print(f"restored and caught up with {RECORDS} changelog records in {waited:.1f}s")
    finally:
        for instance in instances:
            instance.ensure_stopped()
