"""SnapshotRetentionOperator on a file:// location with real snapshots: lists them, keeps the
newest K per task, dry run deletes nothing, bad input is named."""

from __future__ import annotations

import json

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_stateful_provider.operators.snapshots import SnapshotRetentionOperator
from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
from tests.unit.streams.snapshots.two_tasks import take_snapshots


def make_snapshots(tmp_path, per_task: int) -> str:
    return take_snapshots(tmp_path, per_task, keep=99).url


def test_keeps_the_newest_k_per_task_and_reports_every_snapshot(tmp_path):
    url = make_snapshots(tmp_path, 3)
    dry = SnapshotRetentionOperator(task_id="t", application_id="app", snapshot_url=url, keep=2, dry_run=True)
    result = dry.execute({})
    assert len(result["snapshots"]) == 6 and len(result["deleted"]) == 2 and result["dry_run"]
    assert len(SnapshotStorage(url).list_snapshots("app", "0_0")) == 3
    result = SnapshotRetentionOperator(task_id="t", application_id="app", snapshot_url=url, keep=2).execute({})
    assert sorted(d["task_id"] for d in result["deleted"]) == ["0_0", "0_1"]
    oldest = {t: min(s["snapshot_id"] for s in result["snapshots"] if s["task_id"] == t) for t in ("0_0", "0_1")}
    assert all(d["snapshot_id"] == oldest[d["task_id"]] for d in result["deleted"])
    assert [len(SnapshotStorage(url).list_snapshots("app", t)) for t in ("0_0", "0_1")] == [2, 2]
    json.dumps(result)  # XCom-ready


def test_one_streams_task_and_bad_input(tmp_path, monkeypatch):
    url = make_snapshots(tmp_path, 2)
    result = SnapshotRetentionOperator(task_id="t", application_id="app", snapshot_url=url, keep=1,
                                       streams_task="0_1").execute({})
    assert [d["task_id"] for d in result["deleted"]] == ["0_1"]
    with pytest.raises(ValueError, match="keep must be an int >= 1, got 0"):
        SnapshotRetentionOperator(task_id="t", application_id="app", snapshot_url=url, keep=0)
    monkeypatch.setenv("AIRFLOW_CONN_WEIRD", json.dumps({"conn_type": "http", "extra": {"storage_options": 3}}))
    with pytest.raises(AirflowException, match="extra 'storage_options' must be a JSON object, got int"):
        SnapshotRetentionOperator(task_id="t", application_id="app", snapshot_url=url, keep=1,
                                  snapshot_conn_id="weird").execute({})


def aws_connection(**extra):
    from airflow.sdk import Connection

    return Connection(conn_id="snapshots_s3", conn_type="aws", login="AKIAEXAMPLE", password="s3cret",
                      extra=json.dumps(extra))


def test_an_aws_connection_becomes_s3fs_options():
    from airflow_stateful_provider.hooks.snapshot_storage import storage_options_from_connection

    assert storage_options_from_connection(aws_connection(region_name="eu-west-1", profile_name="snapshots")) == {
        "key": "AKIAEXAMPLE", "secret": "s3cret", "profile": "snapshots",
        "client_kwargs": {"region_name": "eu-west-1"}}


@pytest.mark.parametrize("extra", [{"role_arn": "arn:aws:iam::1:role/snapshots"},
                                   {"assume_role_method": "assume_role_with_web_identity"}])
def test_an_assumed_role_is_refused_rather_than_dropped(extra):
    from airflow_stateful_provider.hooks.snapshot_storage import storage_options_from_connection

    with pytest.raises(ValueError, match=r"connection 'snapshots_s3': \[.*\] cannot be used for snapshot storage: "
                                         r"credentials of an assumed role expire") as info:
        storage_options_from_connection(aws_connection(**extra))
    assert "instance profile, IRSA" in str(info.value) and "s3cret" not in str(info.value)
