"""Real snapshots to list and delete: tasks 0_0 and 0_1 of application "app" on a file://
location, each a key-value store "counts" that grows by one key per snapshot, one second apart."""

from __future__ import annotations

from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
from airflow_stateful_provider.streams.snapshots.taking import SnapshotTaker, StoreToSnapshot
from airflow_stateful_provider.streams.state.keyvalue import RocksDBKeyValueStore


def take_snapshots(tmp_path, per_task: int, keep: int) -> SnapshotStorage:
    storage = SnapshotStorage(f"file://{tmp_path / 'shared'}")
    now = [1_700_000_000_000]
    taker = SnapshotTaker(storage, "app", "at_least_once", interval_ms=0, interval_commits=1, keep=keep,
                          clock_ms=lambda: now[0])
    for task in ("0_0", "0_1"):
        store = RocksDBKeyValueStore(str(tmp_path / task / "counts"), name="counts")
        for i in range(per_task):
            store.put(b"k%d" % i, b"v")
            now[0] += 1000
            taker.after_commit(task, str(tmp_path / task), [StoreToSnapshot("counts", store, "c", 0, i)])
            assert taker.wait_idle(30)
        store.close()
    taker.close()
    return storage
