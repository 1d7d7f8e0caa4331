"""Store snapshots on a real broker: a task moves to an instance with an empty state
directory and restores from its snapshot plus the changelog tail; damaged snapshots fall
back to the next one; retention keeps K (docs/snapshots.md).

Instance processes run tests.integration.topologies:configured_counts (a persistent
key-value store ``counts``, one changelog record per input record):

1. ``first`` (state dir A, a snapshot after every commit, keep 2) counts wave 1 in
   chunks, so each task gets several snapshots; it stops cleanly once the newest snapshot
   of every task holds the whole changelog. Retention left exactly 2 per task.
2. ``second`` (state dir A again: local state; no snapshot due within the test) counts
   wave 2 and stops: every changelog now has a tail after the newest snapshot.
3. The newest snapshot of tasks 0_0, 0_1, 0_2 is damaged: a corrupt manifest, a missing
   file, a checksum mismatch. 0_3's stays intact.
4. ``third`` (an empty state dir B) restores every task: 0_3 from its newest snapshot,
   the others from the older one, each plus exactly the changelog records after it. Its
   stores then equal the stores in A, and the status document names the source.

Under both guarantees; exactly-once snapshots are taken right after a transaction
committed, when the stores hold exactly the committed state.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from airflow_stateful_provider.streams.snapshots.manifest import MANIFEST_FILE_NAME
from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
from tests.integration.counts_input import STORE, counts_input, store_contents, wait_all_tasks_running
from tools.instances import InstanceProcess
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, produce, read_all
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

PARTITIONS = 4
KEYS = 800
CHUNK = 1_500
CHUNKS = 4
WAVE_2 = 2_000
TOPOLOGY = "tests.integration.topologies:configured_counts"


def newest_offsets(storage: SnapshotStorage, app: str) -> dict[int, int | None]:
    """Per task, the changelog offset of its newest complete snapshot."""
    offsets: dict[int, int | None] = {}
    for partition in range(PARTITIONS):
        complete = [s for s in storage.list_snapshots(app, f"0_{partition}") if s.complete]
        offsets[partition] = complete[0] and storage.read_manifest(complete[0]).store(STORE).offset \
            if complete else None
    return offsets


def changelog_offsets(bootstrap_servers: str, changelog: str) -> dict[int, list[int]]:
    """Offsets of the committed records per partition (under exactly-once, transaction
    markers take offsets too, so end offsets do not count records)."""
    found: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    for record in read_all(bootstrap_servers, changelog):
        found[record.partition].append(record.offset)
    return found


def damage(storage: SnapshotStorage, app: str, task: str, snapshot_id: str, how: str) -> None:
    root = storage.snapshot_path(app, task, snapshot_id)
    manifest_path = os.path.join(root, MANIFEST_FILE_NAME)
    sst = next(f["path"] for f in json.loads(open(manifest_path).read())["files"] if f["path"].endswith(".sst"))
    if how == "corrupt manifest":
        with open(manifest_path, "r+b") as handle:
            handle.truncate(60)
    elif how == "missing file":
        os.remove(os.path.join(root, sst))
    else:  # checksum mismatch: same size, other bytes
        path = os.path.join(root, sst)
        data = bytearray(open(path, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(path, "wb").write(bytes(data))


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_task_moves_to_an_empty_instance_through_its_snapshot(bootstrap_servers, tmp_path, guarantee):
    app = f"snapshots-{uuid.uuid4().hex[:8]}"
    source, sink = f"{app}-in", f"{app}-out"
    changelog = f"{app}-{STORE}-changelog"
    create_topics(bootstrap_servers, {source: PARTITIONS, sink: PARTITIONS})
    url = f"file://{tmp_path / 'shared'}"
    storage = SnapshotStorage(url)
    state_a, state_b = str(tmp_path / "a"), str(tmp_path / "b")

    def config(state_dir: str, name: str, **snapshots) -> dict:
        return {"application_id": app, "bootstrap_servers": bootstrap_servers, "state_dir": state_dir,
                "instance_id": name, "commit_interval_ms": 100, "status_interval_ms": 300,
                "processing_guarantee": guarantee,
                "snapshot_url": url, "snapshot_retention_count": 2, **snapshots,
                "app_configs": {"input": source, "output": sink}}

    rarely = {"snapshot_interval_ms": 3_600_000}
    instances = []
    try:
        # 1. snapshots after every commit
        first = InstanceProcess(TOPOLOGY, config(state_a, "first", snapshot_interval_commits=1), tmp_path,
                                "first").start()
        instances.append(first)
        for chunk in range(CHUNKS):
            produce(bootstrap_servers, source, counts_input(chunk * CHUNK, CHUNK, KEYS), linger_ms=20)
            ends = end_offsets(bootstrap_servers, source)
            wait_until(lambda ends=ends: first.check_alive()
                       or committed_offsets(bootstrap_servers, app, source) == ends,
                       120, f"chunk {chunk} to be committed", first.log_tail)
        last_records = {p: offsets[-1] for p, offsets in changelog_offsets(bootstrap_servers, changelog).items()}
        wait_until(lambda: first.check_alive() or newest_offsets(storage, app) == last_records, 60,
                   "every task's newest snapshot to hold its whole changelog", first.log_tail)
        assert first.stop() == 0, first.log_tail()

        for partition in range(PARTITIONS):
            snapshots = storage.list_snapshots(app, f"0_{partition}")
            assert [s.complete for s in snapshots] == [True, True], \
                f"retention should keep exactly 2 complete snapshots of 0_{partition}: {snapshots}"

        # 2. a changelog tail after the newest snapshots, counted from local state
        second = InstanceProcess(TOPOLOGY, config(state_a, "second", **rarely), tmp_path, "second").start()
        instances.append(second)
        produce(bootstrap_servers, source, counts_input(CHUNK * CHUNKS, WAVE_2, KEYS), linger_ms=20)
        ends = end_offsets(bootstrap_servers, source)
        wait_until(lambda: second.check_alive() or committed_offsets(bootstrap_servers, app, source) == ends,
                   120, "wave 2 to be committed", second.log_tail)
        assert second.stop() == 0, second.log_tail()
        assert not [e for e in second.events() if e["event"] == "restore_batch"], \
            "the instance with local state restored changelog records"
        records = changelog_offsets(bootstrap_servers, changelog)
        expected = store_contents(state_a, app, PARTITIONS)

        # 3. damage the newest snapshot of three tasks
        chosen: dict[int, int] = {}
        for partition, how in enumerate(["corrupt manifest", "missing file", "checksum mismatch", None]):
            newest, older = storage.list_snapshots(app, f"0_{partition}")
            use = older if how else newest
            chosen[partition] = storage.read_manifest(use).store(STORE).offset
            if how:
                damage(storage, app, f"0_{partition}", newest.snapshot_id, how)
            assert records[partition][-1] > chosen[partition], "no tail to restore"
        tails = {p: sum(1 for offset in records[p] if offset > chosen[p]) for p in range(PARTITIONS)}

        # 4. an empty state directory
        third = InstanceProcess(TOPOLOGY, config(state_b, "third", **rarely), tmp_path, "third").start()
        instances.append(third)
        status = wait_all_tasks_running(bootstrap_servers, app, PARTITIONS, third,
                                        "every task to run on the empty instance")
        by_task = {t.task_id: t for t in status.tasks}
        for partition in range(PARTITIONS):
            restore = by_task[f"0_{partition}"].restore
            assert restore is not None and restore.source == "snapshot", restore
            assert restore.changelog_records == tails[partition], restore
            assert restore.snapshot_offsets == chosen[partition] + 1, restore
            assert len(restore.skipped) == (1 if partition < 3 else 0), restore
        assert third.stop() == 0, third.log_tail()
    finally:
        for instance in instances:
            instance.ensure_stopped()

    starts = {e["partition"]: e["start_offset"] for e in third.events() if e["event"] == "restore_start"}
    assert starts == {p: chosen[p] + 1 for p in range(PARTITIONS)}, "restoration did not start after the snapshot"
    totals = {e["partition"]: e["total"] for e in third.events() if e["event"] == "restore_end"}
    assert totals == tails
    assert store_contents(state_b, app, PARTITIONS) == expected, "the restored stores differ from the original ones"
    log = third.log_path.read_text()
    for how_partition in range(3):
        assert f"skipping snapshot {url}/{app}/0_{how_partition}/" in log
    print(f"\n{guarantee}: restored from snapshots plus {sum(totals.values())} of "
          f"{sum(len(r) for r in records.values())} changelog records")
