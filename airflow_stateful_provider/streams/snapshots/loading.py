"""Loading a snapshot into a task directory whose stores are closed (docs/snapshots.md).

The newest snapshot that passes every check wins; each one that does not is skipped with
a warning naming it and saying what comes next. Checks, in order: a manifest exists and
parses; it belongs to this application and task (a snapshot of another one is not skipped
but refused with ForeignStateError, like a foreign task directory); it holds every
persistent store of the task, logged to the same changelog partition; every store's offset
is still inside its changelog (not below the log start: the records between the snapshot
and today would be missing, nor past the end: the changelog was recreated); every file
downloads with the size and checksum the manifest lists (CRC32C; SHA-256 in format 1
manifests). Files are downloaded into ``<task_dir>/.snapshot-restore-<id>/`` and verified
before anything in the task directory changes, so a corrupt snapshot is never loaded, and
a snapshot deleted meanwhile (retention) does not matter once it is downloaded.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from collections.abc import Mapping

from airflow_stateful_provider.streams.errors import InvalidSnapshotError, InvalidStoreError, SnapshotError
from airflow_stateful_provider.streams.snapshots.manifest import SnapshotManifest
from airflow_stateful_provider.streams.snapshots.storage import SnapshotInfo, SnapshotStorage
from airflow_stateful_provider.streams.state.common.checkpoint import CHECKPOINT_FILE_NAME, write_checkpoint
from airflow_stateful_provider.streams.state.common.metadata import DB_DIR_NAME, read_metadata
from airflow_stateful_provider.streams.topic_partition import TopicPartition

__all__ = ["LoadedSnapshot", "SnapshotLoader"]

log = logging.getLogger(__name__)

RESTORE_STAGING_PREFIX = ".snapshot-restore-"


@dataclasses.dataclass(frozen=True)
class LoadedSnapshot:
    """The snapshot now in the task directory, and the ones skipped on the way to it."""

    url: str
    snapshot_id: str
    taken_at: int
    #: Last changelog offset each store holds (absent: none; restore from the log start).
    offsets: dict[TopicPartition, int]
    total_bytes: int


class SnapshotLoader:
    """Finds, verifies and installs the newest usable snapshot of a task."""

    def __init__(self, storage: SnapshotStorage, application_id: str) -> None:
        self.storage = storage
        self.application_id = application_id

    def load_newest_valid(self, task_id: object, task_dir: str, stores: Mapping[str, TopicPartition],
                          bounds: Mapping[TopicPartition, tuple[int, int]]) -> tuple[LoadedSnapshot | None, list[str]]:
        """Install the newest valid snapshot of ``task_id`` holding ``stores`` (store name ->
        changelog partition; ``bounds``: partition -> (log start, log end)). Returns it (None
        when there is none) and why each newer snapshot was skipped."""
        key = str(task_id)
        skipped: list[str] = []
        try:
            candidates = self.storage.list_snapshots(self.application_id, key)
        except Exception as exc:  # noqa: BLE001 - unreachable storage: the changelog still works
            reason = f"cannot list snapshots at {self.storage.url}: {exc!r}"
            log.warning("task %s: %s; restoring from the changelog", key, reason)
            return None, [reason]
        for index, info in enumerate(candidates):
            name = self.storage.describe(self.application_id, key, info.snapshot_id)
            following = candidates[index + 1].snapshot_id if index + 1 < len(candidates) else None
            then = f"trying the next one, {following}" if following else "restoring from the changelog"
            try:
                loaded = self._try(info, task_dir, stores, bounds)
            except (InvalidSnapshotError, InvalidStoreError) as exc:
                reason = _without_name(str(exc), name)
            except (OSError, SnapshotError) as exc:
                reason = f"could not be read: {_without_name(repr(exc), name)}"
            else:
                log.info("task %s: loaded snapshot %s (%d bytes, offsets %s)", key, name, loaded.total_bytes,
                         {str(tp): off for tp, off in loaded.offsets.items()})
                return loaded, skipped
            log.warning("task %s: skipping snapshot %s: %s; %s", key, name, reason, then)
            skipped.append(f"{info.snapshot_id}: {reason}")
        return None, skipped

    def _try(self, info: SnapshotInfo, task_dir: str, stores: Mapping[str, TopicPartition],
             bounds: Mapping[TopicPartition, tuple[int, int]]) -> LoadedSnapshot:
        name = self.storage.describe(self.application_id, info.task_id, info.snapshot_id)
        if not info.complete:
            raise InvalidSnapshotError(f"snapshot {name} has no manifest (a partial upload, or being deleted)")
        manifest = self.storage.read_manifest(info)  # ForeignStateError propagates: refused, not skipped
        offsets = _check_fits(manifest, name, stores, bounds)
        staging = os.path.join(task_dir, RESTORE_STAGING_PREFIX + info.snapshot_id)
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        try:
            self.storage.download(manifest, staging)
            for store in stores:
                read_metadata(os.path.join(staging, store))  # a store directory this code can open
                if not os.path.isdir(os.path.join(staging, store, DB_DIR_NAME)):
                    raise InvalidSnapshotError(f"snapshot {name}: store {store!r} has no {DB_DIR_NAME}/ directory")
            _install(staging, task_dir, list(stores), offsets)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return LoadedSnapshot(self.storage.url, info.snapshot_id, manifest.taken_at, offsets, manifest.total_bytes)


def _without_name(message: str, name: str) -> str:
    """A reason without the snapshot's URL, which the caller names once."""
    for prefix in (f"snapshot {name}: ", f"snapshot {name} "):
        message = message.replace(prefix, "")
    return message


def _check_fits(manifest: SnapshotManifest, name: str, stores: Mapping[str, TopicPartition],
                bounds: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, int]:
    offsets: dict[TopicPartition, int] = {}
    for store, tp in stores.items():
        entry = manifest.store(store)
        if entry is None:
            raise InvalidSnapshotError(f"snapshot {name} does not hold store {store!r}")
        if (entry.changelog_topic, entry.changelog_partition) != tuple(tp):
            raise InvalidSnapshotError(
                f"snapshot {name}: store {store!r} was logged to {entry.changelog_topic}-{entry.changelog_partition}, "
                f"not {tp[0]}-{tp[1]}")
        if not any(f.path.startswith(f"{store}/{DB_DIR_NAME}/") for f in manifest.files):
            raise InvalidSnapshotError(f"snapshot {name}: the manifest lists no files of store {store!r}")
        begin, end = bounds[tp]
        if entry.offset is None:
            continue
        if entry.offset + 1 < begin:
            raise InvalidSnapshotError(
                f"snapshot {name} is too old: store {store!r} holds {tp[0]}-{tp[1]} up to offset {entry.offset}, "
                f"but the changelog now starts at {begin} (the records in between are gone)")
        if entry.offset + 1 > end:
            raise InvalidSnapshotError(
                f"snapshot {name}: store {store!r} holds {tp[0]}-{tp[1]} up to offset {entry.offset}, past the "
                f"changelog's end {end} (the changelog was recreated or truncated)")
        offsets[TopicPartition(*tp)] = entry.offset
    return offsets


def _install(staging: str, task_dir: str, stores: list[str], offsets: Mapping[TopicPartition, int]) -> None:
    """Replace the task's store directories with the verified ones. The checkpoint goes
    first and comes back last: a crash in between leaves stores without a checkpoint,
    which the next start does not trust as local state."""
    checkpoint = os.path.join(task_dir, CHECKPOINT_FILE_NAME)
    try:
        os.remove(checkpoint)
    except FileNotFoundError:
        pass
    for store in stores:
        target = os.path.join(task_dir, store)
        shutil.rmtree(target, ignore_errors=True)
        os.rename(os.path.join(staging, store), target)
    write_checkpoint(checkpoint, offsets)
