"""Listing and pruning an application's snapshots, for people and operators (the
``stateful-streams snapshots`` CLI and ``SnapshotRetentionOperator``).

A listing reads each manifest, so it also says which snapshots a restore would skip and
why (partial, corrupt manifest); it does not download the files (a restore checks those).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from airflow_stateful_provider.streams.errors import ForeignStateError, InvalidSnapshotError, SnapshotError
from airflow_stateful_provider.streams.snapshots.retention import apply_retention
from airflow_stateful_provider.streams.snapshots.storage import SnapshotInfo, SnapshotStorage

__all__ = ["SNAPSHOT_STORAGE_OPTIONS_ENV", "SnapshotEntry", "delete_old_snapshots", "list_snapshots",
           "storage_options_from_env"]

#: JSON object of fsspec storage options; how the Airflow submit operator hands credentials
#: to spark-submit without putting them on its command line.
SNAPSHOT_STORAGE_OPTIONS_ENV = "STATEFUL_STREAMS_SNAPSHOT_STORAGE_OPTIONS"


def storage_options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The storage options in ``$STATEFUL_STREAMS_SNAPSHOT_STORAGE_OPTIONS`` ({} when unset)."""
    raw = (os.environ if environ is None else environ).get(SNAPSHOT_STORAGE_OPTIONS_ENV)
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"${SNAPSHOT_STORAGE_OPTIONS_ENV} is not valid JSON: {exc.msg} at {exc.pos}") from None
    if not isinstance(options, dict):
        raise SnapshotError(f"${SNAPSHOT_STORAGE_OPTIONS_ENV} must hold a JSON object, got {type(options).__name__}")
    return options


@dataclasses.dataclass(frozen=True)
class SnapshotEntry:
    """One snapshot as listed: when, how big, up to which changelog offsets, and whether a
    restore would consider it (``problem`` says why not)."""

    task_id: str
    snapshot_id: str
    taken_at: int
    complete: bool
    total_bytes: int | None
    files: int | None
    offsets: dict[str, int | None]  # store -> last changelog offset it holds
    problem: str | None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def list_snapshots(storage: SnapshotStorage, application_id: str, task_id: str | None = None) -> list[SnapshotEntry]:
    """Every snapshot of the application (or of one task): by task, newest first."""
    tasks = [task_id] if task_id is not None else storage.list_tasks(application_id)
    entries = []
    for task in tasks:
        for info in storage.list_snapshots(application_id, task):
            entries.append(_entry(storage, info))
    return entries


def _entry(storage: SnapshotStorage, info: SnapshotInfo) -> SnapshotEntry:
    if not info.complete:
        return SnapshotEntry(info.task_id, info.snapshot_id, info.taken_at, False, None, None, {},
                             "no manifest (uploading, abandoned or being deleted)")
    try:
        manifest = storage.read_manifest(info)
    except (InvalidSnapshotError, ForeignStateError) as exc:
        return SnapshotEntry(info.task_id, info.snapshot_id, info.taken_at, True, None, None, {}, str(exc))
    return SnapshotEntry(info.task_id, info.snapshot_id, info.taken_at, True, manifest.total_bytes,
                         len(manifest.files), {s.name: s.offset for s in manifest.stores}, None)


def delete_old_snapshots(storage: SnapshotStorage, application_id: str, keep: int, *, task_id: str | None = None,
                         dry_run: bool = False) -> list[SnapshotInfo]:
    """Keep the newest ``keep`` complete snapshots of each task (retention.py); returns
    what was deleted (or would be, with ``dry_run``)."""
    tasks = [task_id] if task_id is not None else storage.list_tasks(application_id)
    deleted: list[SnapshotInfo] = []
    for task in tasks:
        deleted += apply_retention(storage, application_id, task, keep, dry_run=dry_run)
    return deleted
