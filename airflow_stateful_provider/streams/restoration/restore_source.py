"""Where a task's state comes from when it is assigned: local state, a snapshot or the changelog.

Order (docs/snapshots.md): usable local state (every persistent store directory present,
checkpointed at an offset still inside its changelog), else the newest valid snapshot on
shared storage, else the whole changelog. The changelog reader then restores the tail
after whatever was found. This runs before the task's stores are opened, because a loaded
snapshot replaces their directories.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Any

from airflow_stateful_provider.streams.errors import CorruptCheckpointError
from airflow_stateful_provider.streams.snapshots.loading import SnapshotLoader
from airflow_stateful_provider.streams.state.common.checkpoint import OFFSET_UNKNOWN, OffsetCheckpoint
from airflow_stateful_provider.streams.state.common.metadata import METADATA_FILE_NAME
from airflow_stateful_provider.streams.topic_partition import TopicPartition

__all__ = ["LOCAL", "SNAPSHOT", "CHANGELOG", "RestoreSource", "choose_restore_source"]

log = logging.getLogger(__name__)

LOCAL, SNAPSHOT, CHANGELOG = "local", "snapshot", "changelog"


@dataclasses.dataclass
class RestoreSource:
    """How a task got its state; status documents report it (``tasks[].restore``)."""

    source: str  # LOCAL, SNAPSHOT or CHANGELOG
    snapshot_id: str | None = None
    snapshot_taken_at: int | None = None
    #: Changelog offsets the loaded snapshot covered: what a full replay would have read on top.
    snapshot_offsets: int = 0
    #: Changelog records restored on top of the source (updated while restoring).
    changelog_records: int = 0
    #: Why newer snapshots were not used (one line each).
    skipped: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "snapshot_id": self.snapshot_id, "snapshot_taken_at": self.snapshot_taken_at,
                "snapshot_offsets": self.snapshot_offsets, "changelog_records": self.changelog_records,
                "skipped": list(self.skipped)}


def choose_restore_source(task_id: object, task_dir: str, stores: Mapping[str, TopicPartition],
                          bounds: Mapping[TopicPartition, tuple[int, int]] | None,
                          loader: SnapshotLoader | None) -> RestoreSource:
    """Decide (and, for a snapshot, install) the source of a task's persistent logged
    ``stores`` (name -> changelog partition), given each partition's (log start, log end).
    Without ``bounds`` (snapshots off) checkpoints are not checked against the changelogs:
    the changelog reader does that when the task registers."""
    if not stores:
        return RestoreSource(CHANGELOG)
    unusable = _local_state_problem(task_dir, stores, bounds)
    if unusable is None:
        return RestoreSource(LOCAL)
    if loader is None or bounds is None or all(bounds[tp][0] == bounds[tp][1] for tp in stores.values()):
        return RestoreSource(CHANGELOG)  # no snapshots configured, or nothing to restore anyway
    log.info("task %s: no usable local state (%s); looking for a snapshot", task_id, unusable)
    loaded, skipped = loader.load_newest_valid(task_id, task_dir, stores, bounds)
    if loaded is None:
        return RestoreSource(CHANGELOG, skipped=tuple(skipped))
    covered = sum(loaded.offsets[tp] + 1 - bounds[tp][0] for tp in stores.values() if tp in loaded.offsets)
    return RestoreSource(SNAPSHOT, snapshot_id=loaded.snapshot_id, snapshot_taken_at=loaded.taken_at,
                         snapshot_offsets=covered, skipped=tuple(skipped))


def _local_state_problem(task_dir: str, stores: Mapping[str, TopicPartition],
                         bounds: Mapping[TopicPartition, tuple[int, int]] | None) -> str | None:
    """Why the task's local state cannot be used, or None when it can."""
    try:
        checkpoint = OffsetCheckpoint.in_task_dir(task_dir).read()
    except CorruptCheckpointError as exc:
        return f"corrupt checkpoint: {exc}"
    for store, tp in stores.items():
        if not os.path.exists(os.path.join(task_dir, store, METADATA_FILE_NAME)):
            return f"no directory of store {store!r}"
        offset = checkpoint.get(tp)
        if bounds is None:
            if offset is None or offset == OFFSET_UNKNOWN:
                return f"store {store!r} has no checkpointed offset"
            continue
        begin, end = bounds[tp]
        if offset is None or offset == OFFSET_UNKNOWN:
            if begin == end:
                continue  # an empty changelog: nothing to miss
            return f"store {store!r} has no checkpointed offset"
        if not begin <= offset + 1 <= end:
            return f"store {store!r} is checkpointed at {tp}:{offset}, outside the changelog [{begin}, {end})"
    return None
