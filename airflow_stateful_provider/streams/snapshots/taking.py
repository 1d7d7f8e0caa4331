"""Taking snapshots: a local RocksDB checkpoint on the stream thread, the upload off it.

Right after a task committed, its stores hold exactly the state its changelog offsets
describe (at-least-once: flushed; exactly-once: the committed transaction only, the
buffer is empty). :meth:`SnapshotTaker.after_commit` then decides whether a snapshot is
due (every ``interval_ms`` or every ``interval_commits`` commits, and only if the offsets
moved since the last one), checkpoints every persistent store into
``<task_dir>/.snapshot-<id>/`` (hard links: milliseconds) and queues the upload. One
uploader thread per stream thread uploads the files, writes the manifest last and applies
retention; a task whose previous snapshot is still uploading skips its turn, so uploads
never pile up and processing never waits for the network.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.snapshots.manifest import SnapshotManifest, StoreSnapshot, new_snapshot_id
from airflow_stateful_provider.streams.snapshots.retention import apply_retention
from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
from airflow_stateful_provider.streams.state.common.metadata import DB_DIR_NAME, METADATA_FILE_NAME

__all__ = ["LOCAL_SNAPSHOT_PREFIX", "SnapshotTaker", "StoreToSnapshot"]

log = logging.getLogger(__name__)

#: Local checkpoints waiting for their upload: ``<task_dir>/.snapshot-<id>/``.
LOCAL_SNAPSHOT_PREFIX = ".snapshot-"


@dataclasses.dataclass(frozen=True)
class StoreToSnapshot:
    """One persistent, logged store of a task, as of its last commit."""

    name: str
    store: Any  # a RocksDB store (create_checkpoint, metadata, stats)
    changelog_topic: str
    changelog_partition: int
    #: Offset of the last changelog record the store holds; None when it holds none.
    offset: int | None


@dataclasses.dataclass
class _TaskSchedule:
    last_at_ms: int
    commits: int = 0
    last_offsets: dict[str, int | None] | None = None
    in_flight: bool = False
    #: the last upload failed: take the next snapshot as soon as the task allows, even an
    #: idle one (its commit count was spent on the failed snapshot)
    retry: bool = False


@dataclasses.dataclass
class _Upload:
    task_id: str
    local_dir: str
    manifest: SnapshotManifest  # files filled in by the uploader


class SnapshotTaker:
    """Snapshots of the tasks of one stream thread (see module docstring)."""

    def __init__(self, storage: SnapshotStorage, application_id: str, processing_guarantee: str, *,
                 interval_ms: int, interval_commits: int, keep: int,
                 clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.storage = storage
        self.application_id = application_id
        self.processing_guarantee = processing_guarantee
        self.interval_ms = interval_ms
        self.interval_commits = interval_commits
        self.keep = keep
        self._clock_ms = clock_ms
        self._schedules: dict[str, _TaskSchedule] = {}
        #: Snapshot ids sort by their time stamp: never reuse a millisecond.
        self._last_stamp = 0
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Upload | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        #: Counters for status and tests.
        self.taken = 0
        self.uploaded = 0
        self.failed = 0
        #: The newest uploaded snapshot per task: (snapshot id, taken at ms).
        self.last_uploaded: dict[str, tuple[str, int]] = {}

    # ------------------------------------------------------------------ stream thread side

    def after_commit(self, task_id: object, task_dir: str, stores: list[StoreToSnapshot], *,
                     force: bool = False, count_commit: bool = True) -> str | None:
        """Called right after ``task_id`` committed; takes the local checkpoint when a snapshot
        is due and queues its upload. Returns the snapshot id, or None when none was taken.

        Also called with ``count_commit=False`` for tasks that did not process since their
        last commit (their stores still hold exactly that commit): a snapshot that came due
        while the previous upload was running is taken then, not only at the task's next
        commit, which an idle task never makes."""
        if not stores:
            return None
        key = str(task_id)
        now = self._clock_ms()
        with self._lock:
            schedule = self._schedules.get(key)
            if schedule is None:
                schedule = self._schedules[key] = _TaskSchedule(last_at_ms=now)
                _remove_local_snapshots(task_dir)  # left by a crash: nothing uploads them
            if count_commit:
                schedule.commits += 1
            if schedule.in_flight:
                return None
            offsets = {s.name: s.offset for s in stores}
            if offsets == schedule.last_offsets:
                return None  # nothing changed since the last snapshot
            due = force or schedule.retry or \
                (self.interval_ms > 0 and now - schedule.last_at_ms >= self.interval_ms) or \
                (self.interval_commits > 0 and schedule.commits >= self.interval_commits)
            if not due:
                return None
            schedule.in_flight = True
            now = self._last_stamp = max(now, self._last_stamp + 1)
        snapshot_id = new_snapshot_id(now, uuid.uuid4().hex[:8])
        local_dir = os.path.join(task_dir, LOCAL_SNAPSHOT_PREFIX + snapshot_id)
        try:
            entries = []
            for s in stores:
                store_dir = os.path.join(local_dir, s.name)
                os.makedirs(store_dir)
                shutil.copyfile(os.path.join(s.store.path, METADATA_FILE_NAME),
                                os.path.join(store_dir, METADATA_FILE_NAME))
                s.store.create_checkpoint(os.path.join(store_dir, DB_DIR_NAME))
                entries.append(StoreSnapshot(
                    name=s.name, changelog_topic=s.changelog_topic, changelog_partition=s.changelog_partition,
                    offset=s.offset, store_type=s.store.metadata.store_type,
                    approximate_entries=int(s.store.stats().approximate_num_entries)))
        except Exception:  # a failed snapshot must never stop processing
            log.exception("task %s: could not take the local checkpoint for snapshot %s; processing goes on",
                          key, snapshot_id)
            shutil.rmtree(local_dir, ignore_errors=True)
            with self._lock:
                schedule.in_flight = False
                self.failed += 1
            return None
        with self._lock:
            schedule.last_at_ms, schedule.commits, schedule.last_offsets, schedule.retry = now, 0, offsets, False
            self.taken += 1
        manifest = SnapshotManifest(application_id=self.application_id, task_id=key, snapshot_id=snapshot_id,
                                    taken_at=now, processing_guarantee=self.processing_guarantee,
                                    stores=tuple(entries), files=())
        self._start_thread()
        self._queue.put(_Upload(key, local_dir, manifest))
        return snapshot_id

    def forget(self, task_id: object) -> None:
        """The task left this thread; a new owner starts its own schedule."""
        with self._lock:
            schedule = self._schedules.get(str(task_id))
            if schedule is not None and not schedule.in_flight:
                del self._schedules[str(task_id)]

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued upload finished (tests, clean shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not any(s.in_flight for s in self._schedules.values()):
                    return True
            time.sleep(0.02)
        return False

    def close(self, timeout: float = 30.0) -> None:
        """Finish the uploads already queued (up to ``timeout``), then stop the uploader."""
        if self._thread is None:
            return
        if not self.wait_idle(timeout):
            log.warning("snapshot uploads still running after %.0f s at shutdown; they are abandoned "
                        "(partial snapshots are skipped by restores and removed by retention)", timeout)
        self._queue.put(None)
        self._thread.join(timeout=5)
        self._thread = None

    # ------------------------------------------------------------------ uploader thread

    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="snapshot-uploader", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            try:
                self._upload(job)
            except Exception:  # the next snapshot tries again
                log.exception("task %s: upload of snapshot %s failed; it stays partial and is skipped by restores",
                              job.task_id, self.storage.describe(self.application_id, job.task_id,
                                                                 job.manifest.snapshot_id))
                with self._lock:
                    self.failed += 1
                    schedule = self._schedules.get(job.task_id)
                    if schedule is not None:
                        # again at the next commit, or the next idle round, even with the same offsets
                        schedule.last_offsets, schedule.retry = None, True
            finally:
                shutil.rmtree(job.local_dir, ignore_errors=True)
                with self._lock:
                    schedule = self._schedules.get(job.task_id)
                    if schedule is not None:
                        schedule.in_flight = False

    def _upload(self, job: _Upload) -> None:
        started = time.monotonic()
        files = sorted(
            os.path.relpath(os.path.join(root, name), job.local_dir).replace(os.sep, "/")
            for root, _dirs, names in os.walk(job.local_dir) for name in names)
        manifest = job.manifest
        uploaded = self.storage.upload(job.local_dir, self.application_id, job.task_id, manifest.snapshot_id, files)
        manifest = dataclasses.replace(manifest, files=tuple(uploaded))
        self.storage.write_manifest(manifest)  # last: only now is the snapshot complete
        with self._lock:
            self.uploaded += 1
            self.last_uploaded[job.task_id] = (manifest.snapshot_id, manifest.taken_at)
        log.info("task %s: snapshot %s uploaded (%d files, %d bytes, %.1f s)", job.task_id,
                 self.storage.describe(self.application_id, job.task_id, manifest.snapshot_id),
                 len(uploaded), manifest.total_bytes, time.monotonic() - started)
        deleted = apply_retention(self.storage, self.application_id, job.task_id, self.keep)
        if deleted:
            log.info("task %s: retention deleted %d snapshot(s): %s", job.task_id, len(deleted),
                     ", ".join(d.snapshot_id for d in deleted))


def _remove_local_snapshots(task_dir: str) -> None:
    try:
        names = os.listdir(task_dir)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(LOCAL_SNAPSHOT_PREFIX):
            shutil.rmtree(os.path.join(task_dir, name), ignore_errors=True)
