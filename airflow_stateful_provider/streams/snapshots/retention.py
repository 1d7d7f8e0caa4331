"""Which snapshots of a task to keep: the newest K complete ones (docs/snapshots.md).

Partial snapshots (no manifest) older than the newest complete one are abandoned uploads
and go too; a partial snapshot newer than every complete one may still be uploading and
stays. Deleting removes the manifest first, so a restore that already downloaded a
snapshot loads its verified local copy, and one that had not yet got there skips it as
partial and takes the next.
"""

from __future__ import annotations

from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.snapshots.storage import SnapshotInfo, SnapshotStorage

__all__ = ["apply_retention", "snapshots_beyond_retention"]


def snapshots_beyond_retention(snapshots: list[SnapshotInfo], keep: int) -> list[SnapshotInfo]:
    """Of one task's snapshots (any order), those retention deletes, newest first."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ConfigError(f"snapshots to keep per task must be an int >= 1, got {keep!r}")
    newest_first = sorted(snapshots, key=lambda s: s.snapshot_id, reverse=True)
    complete = [s for s in newest_first if s.complete]
    doomed = complete[keep:]
    if complete:
        newest_complete = complete[0].snapshot_id
        doomed += [s for s in newest_first if not s.complete and s.snapshot_id < newest_complete]
    return sorted(doomed, key=lambda s: s.snapshot_id, reverse=True)


def apply_retention(storage: SnapshotStorage, application_id: str, task_id: str, keep: int, *,
                    dry_run: bool = False) -> list[SnapshotInfo]:
    """Delete the task's snapshots beyond retention; returns them (deleted unless ``dry_run``)."""
    doomed = snapshots_beyond_retention(storage.list_snapshots(application_id, task_id), keep)
    if not dry_run:
        for info in doomed:
            storage.delete(info)
    return doomed
