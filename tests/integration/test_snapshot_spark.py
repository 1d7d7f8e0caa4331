"""Snapshots on Spark: the storage credentials reach the instances on the executors through
the driver's environment only (``STATEFUL_STREAMS_SNAPSHOT_STORAGE_OPTIONS``, what
SubmitTopologyOperator sets), never the spark-submit arguments or the config file, and the
executors' snapshots land on an S3-compatible server (moto, tests/integration/s3_server.py).
"""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_stateful_provider.streams.snapshots.catalog import SNAPSHOT_STORAGE_OPTIONS_ENV
from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
from tests.integration.s3_server import moto_s3_server, s3_storage_options
from tools.changelog_state import COUNTS_STORE, fill_counts_changelog
from tools.kafka.topics import create_topics, end_offsets, produce
from tools.spark_app import SparkApplication
from tools.waits import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PARTITIONS = 2


def test_executors_snapshot_to_s3_with_credentials_from_the_driver_environment(bootstrap_servers, tmp_path):
    app_id = f"spark-snapshots-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap_servers, {f"{app_id}-in": PARTITIONS, f"{app_id}-out": PARTITIONS})
    fill_counts_changelog(bootstrap_servers, app_id, PARTITIONS, 20_000)
    changelog = f"{app_id}-{COUNTS_STORE}-changelog"
    with moto_s3_server(tmp_path) as endpoint:
        options = s3_storage_options(endpoint)
        bucket = f"snapshots-{uuid.uuid4().hex[:8]}"
        storage = SnapshotStorage(f"s3://{bucket}/streams", options)
        storage.fs.mkdir(bucket)
        config = {"application_id": app_id, "bootstrap_servers": bootstrap_servers,
                  "state_dir": str(tmp_path / "state"), "commit_interval_ms": 200, "status_interval_ms": 300,
                  "snapshot_url": storage.url, "snapshot_interval_commits": 1,
                  "consumer_configs": {"session_timeout_ms": 10_000},
                  "app_configs": {"input": f"{app_id}-in", "output": f"{app_id}-out"}}
        app = SparkApplication("tests.integration.topologies:configured_counts", config, tmp_path, instances=2,
                               env={SNAPSHOT_STORAGE_OPTIONS_ENV: json.dumps(options)}).start()
        try:
            app.wait_for_event("instance_started", 120)
            # input, so the tasks commit and snapshot
            produce(bootstrap_servers, f"{app_id}-in", [(b"key-%d" % i, b'{"n": 1}') for i in range(400)])

            def snapshotted_to_the_end() -> bool:
                app.check_running()
                ends = end_offsets(bootstrap_servers, changelog)
                for partition in range(PARTITIONS):
                    complete = [s for s in storage.list_snapshots(app_id, f"0_{partition}") if s.complete]
                    if not complete or ends.get(partition, 0) <= 20_000 // PARTITIONS or \
                            storage.read_manifest(complete[0]).store(COUNTS_STORE).offset != ends[partition] - 1:
                        return False
                return True

            wait_until(snapshotted_to_the_end, 180, "snapshots of every task holding the input's changelog records",
                       app.log_tail)
            app.terminate_driver()
            assert app.wait(120) == 0, app.log_tail()
        finally:
            app.kill()
    assert options["secret"] not in (tmp_path / "app.json").read_text(), "the credential is in the config file"
    assert options["secret"] not in app.log_path.read_text(), "the credential reached the driver log"
