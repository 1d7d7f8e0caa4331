"""Snapshots on an S3-compatible server (moto in server mode, reached through s3fs over
HTTP): an instance snapshots to ``s3://``, a second one with an empty state directory
restores from there, and retention keeps K on the object store too.

The server runs as a separate process on a free loopback port (tests/integration/s3_server.py);
the instances get the endpoint and the (dummy) credentials as fsspec storage options.
"""

from __future__ import annotations

import uuid

import pytest

from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
from tests.integration.counts_input import STORE, counts_input, store_contents, wait_all_tasks_running
from tests.integration.s3_server import moto_s3_server, s3_storage_options
from tools.instances import InstanceProcess
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, produce
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

PARTITIONS = 2
KEYS = 300
TOPOLOGY = "tests.integration.topologies:configured_counts"


@pytest.fixture
def s3_endpoint(tmp_path):
    with moto_s3_server(tmp_path) as endpoint:
        yield endpoint


def test_snapshots_on_s3_move_a_task_to_an_empty_instance(bootstrap_servers, tmp_path, s3_endpoint):
    options = s3_storage_options(s3_endpoint)
    bucket = f"snapshots-{uuid.uuid4().hex[:8]}"
    url = f"s3://{bucket}/streams"
    storage = SnapshotStorage(url, options)
    storage.fs.mkdir(bucket)
    app = f"s3-snapshots-{uuid.uuid4().hex[:8]}"
    source, sink = f"{app}-in", f"{app}-out"
    changelog = f"{app}-{STORE}-changelog"
    create_topics(bootstrap_servers, {source: PARTITIONS, sink: PARTITIONS})

    def config(state_dir: str, name: str, **snapshots) -> dict:
        return {"application_id": app, "bootstrap_servers": bootstrap_servers, "state_dir": state_dir,
                "instance_id": name, "commit_interval_ms": 100, "status_interval_ms": 300,
                "snapshot_url": url, "snapshot_storage_options": options, "snapshot_retention_count": 2,
                **snapshots, "app_configs": {"input": source, "output": sink}}

    instances = []
    try:
        first = InstanceProcess(TOPOLOGY, config(str(tmp_path / "a"), "first", snapshot_interval_commits=1),
                                tmp_path, "first").start()
        instances.append(first)
        for chunk in range(3):
            produce(bootstrap_servers, source, counts_input(chunk * 1000, 1000, KEYS), linger_ms=20)
            ends = end_offsets(bootstrap_servers, source)
            wait_until(lambda ends=ends: first.check_alive()
                       or committed_offsets(bootstrap_servers, app, source) == ends,
                       120, f"chunk {chunk} to be committed", first.log_tail)
        changelog_ends = end_offsets(bootstrap_servers, changelog)

        def newest_holds_everything() -> bool:
            first.check_alive()
            for partition in range(PARTITIONS):
                complete = [s for s in storage.list_snapshots(app, f"0_{partition}") if s.complete]
                if not complete or storage.read_manifest(complete[0]).store(STORE).offset != \
                        changelog_ends[partition] - 1:
                    return False
            return True

        wait_until(newest_holds_everything, 60, "the newest snapshots to hold the whole changelogs", first.log_tail)
        assert first.stop() == 0, first.log_tail()
        for partition in range(PARTITIONS):
            assert [s.complete for s in storage.list_snapshots(app, f"0_{partition}")] == [True, True]
        newest = {p: storage.list_snapshots(app, f"0_{p}")[0].snapshot_id for p in range(PARTITIONS)}

        second = InstanceProcess(TOPOLOGY, config(str(tmp_path / "b"), "second", snapshot_interval_ms=3_600_000),
                                 tmp_path, "second").start()
        instances.append(second)
        status = wait_all_tasks_running(bootstrap_servers, app, PARTITIONS, second,
                                        "the tasks to run on the empty instance")
        for task in status.tasks:
            assert task.restore is not None and task.restore.source == "snapshot", task
            assert task.restore.snapshot_id == newest[int(task.task_id.split("_")[1])]
            assert task.restore.changelog_records == 0 and not task.restore.skipped
        assert second.stop() == 0, second.log_tail()
    finally:
        for instance in instances:
            instance.ensure_stopped()
    assert store_contents(str(tmp_path / "b"), app, PARTITIONS) == store_contents(str(tmp_path / "a"), app, PARTITIONS)
    assert options["secret"] not in second.log_path.read_text(), "a credential reached the log"
