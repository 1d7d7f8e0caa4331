"""Snapshots on a file:// location with real RocksDB stores: take, upload, verify, load,
fall back, retention (docs/snapshots.md). The broker-side behaviour is in
tests/integration/test_snapshot_restore.py."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from airflow_stateful_provider.streams.errors import ConfigError, InvalidSnapshotError
from airflow_stateful_provider.streams.restoration.restore_source import choose_restore_source
from airflow_stateful_provider.streams.snapshots.file_checksums import file_checksum
from airflow_stateful_provider.streams.snapshots.loading import SnapshotLoader
from airflow_stateful_provider.streams.snapshots.manifest import MANIFEST_FILE_NAME, SnapshotManifest
from airflow_stateful_provider.streams.snapshots.retention import apply_retention, snapshots_beyond_retention
from airflow_stateful_provider.streams.snapshots.storage import SnapshotInfo, SnapshotStorage
from airflow_stateful_provider.streams.snapshots.taking import SnapshotTaker, StoreToSnapshot
from airflow_stateful_provider.streams.state.common.checkpoint import OffsetCheckpoint
from airflow_stateful_provider.streams.state.keyvalue import RocksDBKeyValueStore
from airflow_stateful_provider.streams.state.store_dir import open_store
from airflow_stateful_provider.streams.topic_partition import TopicPartition

APP = "app"
TP = TopicPartition("app-counts-changelog", 0)
STORES = {"counts": TP}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def storage(tmp_path):
    return SnapshotStorage(f"file://{tmp_path / 'shared'}")


def fill(store, start: int, count: int) -> None:
    for i in range(start, start + count):
        store.put(b"k%06d" % i, b"v%d" % i)


def take(storage, tmp_path, store, offset, clock, *, keep=3, transactional=False) -> str:
    taker = SnapshotTaker(storage, APP, "at_least_once", interval_ms=0, interval_commits=1, keep=keep, clock_ms=clock)
    snapshot_id = taker.after_commit("0_0", str(tmp_path / "task"), [
        StoreToSnapshot("counts", store, TP.topic, TP.partition, offset)])
    assert snapshot_id is not None
    assert taker.wait_idle(30)
    taker.close()
    assert taker.uploaded == 1, f"upload failed ({taker.failed} failures)"
    return snapshot_id


def new_store(tmp_path, **kwargs):
    return RocksDBKeyValueStore(str(tmp_path / "task" / "counts"), name="counts", **kwargs)


def load(storage, tmp_path, bounds=(0, 1000), name="fresh"):
    task_dir = str(tmp_path / name)
    os.makedirs(task_dir, exist_ok=True)
    source = choose_restore_source("0_0", task_dir, STORES, {TP: bounds}, SnapshotLoader(storage, APP))
    return source, task_dir


def contents(task_dir: str) -> dict[bytes, bytes]:
    with open_store(os.path.join(task_dir, "counts"), read_only=True) as store:
        return dict(store.all())


def test_snapshot_moves_the_store_to_an_empty_task_directory(storage, tmp_path):
    clock = Clock()
    store = new_store(tmp_path)
    fill(store, 0, 500)  # written without the WAL and not flushed: the checkpoint must flush
    snapshot_id = take(storage, tmp_path, store, 499, clock)
    fill(store, 500, 10)  # after the snapshot: not in it
    expected = {b"k%06d" % i: b"v%d" % i for i in range(500)}
    store.close()

    source, task_dir = load(storage, tmp_path)
    assert source.source == "snapshot" and source.snapshot_id == snapshot_id
    assert source.snapshot_taken_at == clock.now and source.snapshot_offsets == 500
    assert contents(task_dir) == expected
    assert OffsetCheckpoint.in_task_dir(task_dir).read() == {TP: 499}
    assert not [n for n in os.listdir(task_dir) if n.startswith(".snapshot")], "staging left behind"
    assert not os.path.exists(tmp_path / "task" / f".snapshot-{snapshot_id}"), "local checkpoint left behind"

    # the same directory again: its local state is usable now, nothing is downloaded
    source = choose_restore_source("0_0", task_dir, STORES, {TP: (0, 1000)}, SnapshotLoader(storage, APP))
    assert source.source == "local"


def test_transactional_store_snapshots_committed_writes_only(storage, tmp_path):
    clock = Clock()
    store = new_store(tmp_path, transactional=True)
    fill(store, 0, 100)
    store.commit_transaction()
    fill(store, 100, 50)  # buffered, not committed
    taker = SnapshotTaker(storage, APP, "exactly_once_v2", interval_ms=0, interval_commits=1, keep=3, clock_ms=clock)
    entry = StoreToSnapshot("counts", store, TP.topic, TP.partition, 99)
    assert taker.after_commit("0_0", str(tmp_path / "task"), [entry]) is None, "snapshot with a buffer pending"
    store.abort_transaction()
    assert taker.after_commit("0_0", str(tmp_path / "task"), [entry]) is not None
    assert taker.wait_idle(30)
    taker.close()
    store.close()
    source, task_dir = load(storage, tmp_path)
    assert source.source == "snapshot"
    assert contents(task_dir) == {b"k%06d" % i: b"v%d" % i for i in range(100)}


def snapshot_dir(storage, snapshot_id: str) -> str:
    return storage.snapshot_path(APP, "0_0", snapshot_id)


def two_snapshots(storage, tmp_path) -> tuple[str, str]:
    clock = Clock()
    store = new_store(tmp_path)
    fill(store, 0, 100)
    older = take(storage, tmp_path, store, 99, clock)
    fill(store, 100, 100)
    clock.now += 60_000
    newer = take(storage, tmp_path, store, 199, clock)
    store.close()
    return older, newer


def sst_file(storage, snapshot_id: str) -> str:
    manifest = json.loads(open(os.path.join(snapshot_dir(storage, snapshot_id), MANIFEST_FILE_NAME)).read())
    return next(f["path"] for f in manifest["files"] if f["path"].endswith(".sst"))


@pytest.mark.parametrize("damage", ["corrupt manifest", "missing file", "checksum mismatch", "partial"])
def test_a_damaged_snapshot_is_skipped_for_the_next_one(storage, tmp_path, damage, caplog):
    older, newer = two_snapshots(storage, tmp_path)
    root = snapshot_dir(storage, newer)
    if damage == "corrupt manifest":
        with open(os.path.join(root, MANIFEST_FILE_NAME), "r+b") as handle:
            handle.truncate(40)
    elif damage == "missing file":
        os.remove(os.path.join(root, sst_file(storage, newer)))
    elif damage == "checksum mismatch":
        path = os.path.join(root, sst_file(storage, newer))
        data = bytearray(open(path, "rb").read())
        data[len(data) // 2] ^= 0xFF  # same size, other bytes
        open(path, "wb").write(bytes(data))
    else:
        os.remove(os.path.join(root, MANIFEST_FILE_NAME))
    caplog.set_level("WARNING")
    source, task_dir = load(storage, tmp_path)
    assert source.source == "snapshot" and source.snapshot_id == older, source
    assert len(source.skipped) == 1 and source.skipped[0].startswith(newer)
    if damage == "checksum mismatch":
        assert f"{sst_file(storage, newer)} has crc32c " in source.skipped[0], source.skipped
    assert contents(task_dir) == {b"k%06d" % i: b"v%d" % i for i in range(100)}
    assert OffsetCheckpoint.in_task_dir(task_dir).read() == {TP: 99}
    warning = next(r.getMessage() for r in caplog.records if "skipping snapshot" in r.getMessage())
    assert newer in warning and older in warning, warning


def as_format_1(storage, snapshot_id: str) -> None:
    """Rewrite a snapshot's manifest as a version before CRC32C wrote it: format 1, SHA-256."""
    root = snapshot_dir(storage, snapshot_id)
    manifest = json.loads(open(os.path.join(root, MANIFEST_FILE_NAME)).read())
    assert manifest["format_version"] == 2 and all(set(f) == {"path", "size", "crc32c"} for f in manifest["files"])
    manifest["format_version"] = 1
    manifest["files"] = [{"path": f["path"], "size": f["size"], "sha256": hashlib.sha256(
        open(os.path.join(root, f["path"]), "rb").read()).hexdigest()} for f in manifest["files"]]
    open(os.path.join(root, MANIFEST_FILE_NAME), "w").write(json.dumps(manifest))


@pytest.mark.parametrize("damaged", [False, True])
def test_a_format_1_snapshot_is_checked_with_its_sha256(storage, tmp_path, damaged):
    """Snapshots taken before manifest format 2 keep loading, verified by SHA-256."""
    older, newer = two_snapshots(storage, tmp_path)
    as_format_1(storage, newer)
    if damaged:
        path = os.path.join(snapshot_dir(storage, newer), sst_file(storage, newer))
        data = bytearray(open(path, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(path, "wb").write(bytes(data))
    source, task_dir = load(storage, tmp_path)
    if damaged:
        assert source.snapshot_id == older and f"{sst_file(storage, newer)} has sha256 " in source.skipped[0]
        assert contents(task_dir) == {b"k%06d" % i: b"v%d" % i for i in range(100)}
    else:
        assert source.snapshot_id == newer and not source.skipped, source
        assert contents(task_dir) == {b"k%06d" % i: b"v%d" % i for i in range(200)}


def test_download_fetches_files_side_by_side_and_names_the_first_damaged_one(storage, tmp_path):
    """Files download on several threads; every file lands with its listed bytes, and with
    two files damaged the error names the first of the manifest, whichever thread ends first."""
    _, newer = two_snapshots(storage, tmp_path)
    info = next(i for i in storage.list_snapshots(APP, "0_0") if i.snapshot_id == newer)
    manifest = storage.read_manifest(info)
    assert len(manifest.files) >= 3, manifest.files  # enough files for several threads
    good = tmp_path / "good"
    storage.download(manifest, str(good))
    for entry in manifest.files:
        local = good.joinpath(*entry.path.split("/"))
        assert file_checksum(str(local), "crc32c") == (entry.size, entry.checksum), entry.path
    first, last = manifest.files[0].path, manifest.files[-1].path
    root = snapshot_dir(storage, newer)
    os.remove(os.path.join(root, last))  # a missing file the threads may well reach first
    with open(os.path.join(root, first), "ab") as handle:
        handle.write(b"extra")
    with pytest.raises(InvalidSnapshotError, match=rf"file {first} has \d+ bytes, the manifest says "):
        storage.download(manifest, str(tmp_path / "damaged"))


def test_every_snapshot_damaged_falls_back_to_the_changelog_without_touching_the_task(storage, tmp_path):
    older, newer = two_snapshots(storage, tmp_path)
    for snapshot_id in (older, newer):
        os.remove(os.path.join(snapshot_dir(storage, snapshot_id), sst_file(storage, snapshot_id)))
    source, task_dir = load(storage, tmp_path)
    assert source.source == "changelog" and len(source.skipped) == 2
    assert os.listdir(task_dir) == [], "a damaged snapshot left files in the task directory"


def test_a_snapshot_below_the_log_start_is_too_old(storage, tmp_path):
    older, newer = two_snapshots(storage, tmp_path)
    source, _ = load(storage, tmp_path, bounds=(150, 1000))  # offsets 0..149 deleted from the changelog
    assert source.source == "snapshot" and source.snapshot_id == newer
    source, _ = load(storage, tmp_path, bounds=(201, 1000), name="other")
    assert source.source == "changelog"
    assert all("too old" in reason for reason in source.skipped), source.skipped


def test_a_snapshot_past_the_changelog_end_is_refused(storage, tmp_path):
    two_snapshots(storage, tmp_path)
    source, _ = load(storage, tmp_path, bounds=(0, 150))  # the changelog was recreated shorter
    assert source.source == "snapshot" and source.snapshot_offsets == 100
    assert "past the changelog's end" in source.skipped[0]


def test_retention_keeps_the_newest_k(storage, tmp_path):
    clock = Clock()
    store = new_store(tmp_path)
    ids = []
    for i in range(5):
        fill(store, i * 10, 10)
        clock.now += 1000
        ids.append(take(storage, tmp_path, store, i * 10 + 9, clock, keep=2))
    store.close()
    assert [s.snapshot_id for s in storage.list_snapshots(APP, "0_0")] == ids[::-1][:2]
    second_newest = storage.list_snapshots(APP, "0_0")[1]
    assert apply_retention(storage, APP, "0_0", 1) == [second_newest]
    assert [s.snapshot_id for s in storage.list_snapshots(APP, "0_0")] == [ids[-1]]


def test_retention_keeps_an_upload_in_flight_and_drops_abandoned_ones():
    def info(n: int, complete: bool) -> SnapshotInfo:
        return SnapshotInfo(APP, "0_0", f"{1_700_000_000_000 + n:013d}-0000000{n}", 0, complete)

    snaps = [info(1, True), info(2, False), info(3, True), info(4, True), info(5, False)]
    doomed = snapshots_beyond_retention(snaps, 2)
    assert [s.snapshot_id for s in doomed] == [snaps[1].snapshot_id, snaps[0].snapshot_id]
    with pytest.raises(ConfigError, match="keep per task must be an int >= 1, got 0"):
        snapshots_beyond_retention(snaps, 0)


def test_manifest_parsing_names_the_field():
    with pytest.raises(InvalidSnapshotError, match="field 'taken_at' must be an int >= 0, got '1'"):
        SnapshotManifest.from_json(json.dumps({
            "format_version": 1, "application_id": "a", "task_id": "0_0", "snapshot_id": "1700000000000-abcdef01",
            "taken_at": "1", "processing_guarantee": "at_least_once", "stores": [], "files": []}), "m")
    with pytest.raises(InvalidSnapshotError, match=r"path '\.\./x' must be relative"):
        SnapshotManifest.from_json(json.dumps({
            "format_version": 1, "application_id": "a", "task_id": "0_0", "snapshot_id": "1700000000000-abcdef01",
            "taken_at": 1, "processing_guarantee": "at_least_once", "stores": [],
            "files": [{"path": "../x", "size": 1, "sha256": "0" * 64}]}), "m")
    with pytest.raises(InvalidSnapshotError, match=r"files\[0\]: field 'crc32c' is missing"):
        SnapshotManifest.from_json(json.dumps({
            "format_version": 2, "application_id": "a", "task_id": "0_0", "snapshot_id": "1700000000000-abcdef01",
            "taken_at": 1, "processing_guarantee": "at_least_once", "stores": [],
            "files": [{"path": "x", "size": 1, "sha256": "0" * 64}]}), "m")
    with pytest.raises(InvalidSnapshotError, match="crc32c 'ABCDEF01' is not a lowercase hex digest"):
        SnapshotManifest.from_json(json.dumps({
            "format_version": 2, "application_id": "a", "task_id": "0_0", "snapshot_id": "1700000000000-abcdef01",
            "taken_at": 1, "processing_guarantee": "at_least_once", "stores": [],
            "files": [{"path": "x", "size": 1, "crc32c": "ABCDEF01"}]}), "m")
    with pytest.raises(InvalidSnapshotError, match=r"format_version 3 is not one of \[1, 2\]; upgrade"):
        SnapshotManifest.from_json(json.dumps({"format_version": 3}), "m")


def test_snapshot_settings_are_checked():
    from airflow_stateful_provider.streams import StreamsConfig

    base = {"application_id": "a", "bootstrap_servers": "h:1"}
    with pytest.raises(ConfigError, match="snapshot_url must be a URL"):
        StreamsConfig(**base, snapshot_url="/mnt/snapshots")
    with pytest.raises(ConfigError, match="both 0"):
        StreamsConfig(**base, snapshot_url="file:///x", snapshot_interval_ms=0)
    with pytest.raises(ConfigError, match="transactional_state_stores"):
        StreamsConfig(**base, snapshot_url="file:///x", processing_guarantee="exactly_once_v2",
                      transactional_state_stores=False)
    secret = StreamsConfig(**base, snapshot_url="s3://b/p", snapshot_storage_options={"secret": "hunter2"})
    assert "hunter2" not in repr(secret)


class DeletedMeanwhile(SnapshotStorage):
    """A location where retention (another process) deletes the snapshot being restored,
    before or after this restore downloads its files."""

    def __init__(self, url: str, when: str) -> None:
        super().__init__(url)
        self.when = when
        self.deleted = False

    def download(self, manifest, local_dir):
        info = SnapshotInfo(APP, manifest.task_id, manifest.snapshot_id, manifest.taken_at, True)
        if self.when == "before" and not self.deleted:  # only the first (newest) one
            self.delete(info)
            self.deleted = True
        super().download(manifest, local_dir)
        if self.when == "after" and not self.deleted:
            self.delete(info)
            self.deleted = True


@pytest.mark.parametrize("when", ["before", "after"])
def test_retention_deleting_the_snapshot_being_restored_does_not_break_the_restore(storage, tmp_path, when):
    older, newer = two_snapshots(storage, tmp_path)
    racing = DeletedMeanwhile(storage.url, when)
    task_dir = str(tmp_path / "fresh")
    os.makedirs(task_dir)
    source = choose_restore_source("0_0", task_dir, STORES, {TP: (0, 1000)}, SnapshotLoader(racing, APP))
    assert source.source == "snapshot"
    if when == "before":  # its files were gone: the next one is used
        assert source.snapshot_id == older and "is missing" in source.skipped[0]
        assert contents(task_dir) == {b"k%06d" % i: b"v%d" % i for i in range(100)}
    else:  # downloaded and verified first: the local copy is loaded
        assert source.snapshot_id == newer and not source.skipped
        assert contents(task_dir) == {b"k%06d" % i: b"v%d" % i for i in range(200)}


def test_without_snapshots_the_source_comes_from_the_checkpoint_alone(tmp_path):
    task_dir = str(tmp_path / "task")
    store = new_store(tmp_path)
    fill(store, 0, 10)
    store.close()
    assert choose_restore_source("0_0", task_dir, STORES, None, None).source == "changelog"  # no checkpoint
    OffsetCheckpoint.in_task_dir(task_dir).write({TP: 9})
    assert choose_restore_source("0_0", task_dir, STORES, None, None).source == "local"


class GatedStorage(SnapshotStorage):
    """Uploads wait for ``gate``: holds a snapshot in flight as long as the test wants."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import threading

        self.gate = threading.Event()

    def upload(self, *args, **kwargs):
        assert self.gate.wait(30)
        return super().upload(*args, **kwargs)


def test_a_snapshot_due_during_an_upload_is_taken_once_the_task_is_idle(tmp_path):
    storage = GatedStorage(f"file://{tmp_path / 'shared'}")
    taker = SnapshotTaker(storage, APP, "at_least_once", interval_ms=0, interval_commits=1, keep=3, clock_ms=Clock())
    store = new_store(tmp_path)
    task_dir = str(tmp_path / "task")
    fill(store, 0, 10)
    first = taker.after_commit("0_0", task_dir, [StoreToSnapshot("counts", store, TP.topic, TP.partition, 9)])
    fill(store, 10, 10)
    entry = StoreToSnapshot("counts", store, TP.topic, TP.partition, 19)
    assert first is not None and taker.after_commit("0_0", task_dir, [entry]) is None  # the first still uploads
    storage.gate.set()
    assert taker.wait_idle(30)
    # the task is idle now (no further commit): the idle round takes the snapshot it missed
    second = taker.after_commit("0_0", task_dir, [entry], count_commit=False)
    assert second is not None and taker.wait_idle(30)
    assert taker.after_commit("0_0", task_dir, [entry], count_commit=False) is None  # nothing new since
    taker.close()
    store.close()
    newest = storage.list_snapshots(APP, "0_0")[0]
    assert newest.snapshot_id == second and storage.read_manifest(newest).store("counts").offset == 19


class FailingOnceStorage(SnapshotStorage):
    """The first upload fails (an unreachable store, a timeout), the next ones work."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.failures_left = 1

    def upload(self, *args, **kwargs):
        if self.failures_left:
            self.failures_left -= 1
            raise OSError("storage unreachable")
        return super().upload(*args, **kwargs)


def test_an_idle_task_takes_again_the_snapshot_whose_upload_failed(tmp_path):
    storage = FailingOnceStorage(f"file://{tmp_path / 'shared'}")
    taker = SnapshotTaker(storage, APP, "at_least_once", interval_ms=0, interval_commits=1, keep=3, clock_ms=Clock())
    store = new_store(tmp_path)
    task_dir = str(tmp_path / "task")
    fill(store, 0, 10)
    entry = StoreToSnapshot("counts", store, TP.topic, TP.partition, 9)
    assert taker.after_commit("0_0", task_dir, [entry]) is not None
    assert taker.wait_idle(30) and taker.failed == 1
    # no commit since (the task went idle): the idle round takes it again, same offsets and all
    retried = taker.after_commit("0_0", task_dir, [entry], count_commit=False)
    assert retried is not None and taker.wait_idle(30)
    assert taker.after_commit("0_0", task_dir, [entry], count_commit=False) is None  # done: nothing new since
    taker.close()
    store.close()
    [snapshot] = [s for s in storage.list_snapshots(APP, "0_0") if s.complete]
    assert snapshot.snapshot_id == retried and storage.read_manifest(snapshot).store("counts").offset == 9
