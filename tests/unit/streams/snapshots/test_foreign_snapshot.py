"""A snapshot of another application, found under this application's prefix, is refused like a
foreign task directory (ForeignStateError), not skipped, and nothing is loaded."""

from __future__ import annotations

import os
import shutil

import pytest

from airflow_stateful_provider.streams import ForeignStateError, list_snapshots
from airflow_stateful_provider.streams.restoration.restore_source import choose_restore_source
from airflow_stateful_provider.streams.snapshots.loading import SnapshotLoader
from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
from airflow_stateful_provider.streams.snapshots.taking import SnapshotTaker, StoreToSnapshot
from airflow_stateful_provider.streams.state.keyvalue import RocksDBKeyValueStore
from airflow_stateful_provider.streams.topic_partition import TopicPartition


def take_snapshot(storage: SnapshotStorage, tmp_path, application_id: str, topic: str) -> str:
    store = RocksDBKeyValueStore(str(tmp_path / application_id / "counts"), name="counts")
    store.put(b"k", b"v")
    taker = SnapshotTaker(storage, application_id, "at_least_once", interval_ms=0, interval_commits=1, keep=3)
    snapshot_id = taker.after_commit("0_0", str(tmp_path / application_id), [StoreToSnapshot("counts", store, topic,
                                                                                             0, 0)])
    assert snapshot_id is not None and taker.wait_idle(30)
    taker.close()
    store.close()
    assert taker.uploaded == 1
    return snapshot_id


def test_a_snapshot_of_another_application_is_refused_and_nothing_is_loaded(tmp_path):
    storage = SnapshotStorage(f"file://{tmp_path / 'shared'}")
    snapshot_id = take_snapshot(storage, tmp_path, "other", "other-counts-changelog")
    os.makedirs(storage.task_path("app", "0_0"))
    shutil.copytree(storage.snapshot_path("other", "0_0", snapshot_id),
                    storage.snapshot_path("app", "0_0", snapshot_id))
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    tp = TopicPartition("app-counts-changelog", 0)
    with pytest.raises(ForeignStateError) as refused:
        choose_restore_source("0_0", str(task_dir), {"counts": tp}, {tp: (0, 10)}, SnapshotLoader(storage, "app"))
    assert str(refused.value) == (
        f"snapshot {storage.describe('app', '0_0', snapshot_id)} holds state of application 'other', task 0_0, not "
        f"of application 'app', task 0_0: it is never loaded; move it out of {storage.url}/app/0_0/ (or delete it) "
        f"and start again")
    assert os.listdir(task_dir) == []
    (entry,) = list_snapshots(storage, "app")  # the catalog lists it, refused
    assert entry.snapshot_id == snapshot_id and entry.problem == str(refused.value)
