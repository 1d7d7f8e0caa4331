"""StandbyTask: a warm copy of a stateful task's stores.

A standby never processes records: the thread's ChangelogReader applies the task's
changelogs to its stores continuously, so that if the task's active instance fails, or the
task moves here, it resumes from (nearly) where the active was instead of replaying the
whole changelog. A *warmup* is a standby the assignor placed to move the task here once it
has caught up (docs/semantics.md §3). Promoted to active, the standby hands its open stores to the
new StreamTask.
"""

from __future__ import annotations

from typing import Any

from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
from airflow_stateful_provider.streams.processing.task import TaskState
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = ["StandbyTask"]


class StandbyTask:
    """Stores kept up to date for a task this thread does not run (see module docstring)."""

    def __init__(self, task_id: TaskId, stores: TaskStateManager, collector: RecordCollector, *,
                 warmup: bool = False) -> None:
        self.id = task_id
        #: The TaskStateManager; the ChangelogReader writes into it.
        self.stores = stores
        #: The RecordCollector its stores' changelog writers use once it is promoted.
        self.collector = collector
        self.warmup = warmup
        #: RUNNING while it is being updated (the status document calls it "running").
        self.state = TaskState.RUNNING

    def checkpoint(self, *, force: bool = False) -> None:
        """Record how far the stores are (docs/semantics.md §1: every 10,000 offsets, or forced)."""
        self.stores.checkpoint({}, force=force)

    def release_stores(self) -> Any:
        """Give the open stores to the active task this standby becomes."""
        self.state = TaskState.CLOSED
        return self.stores

    def close(self, *, clean: bool = True) -> None:
        if self.state is TaskState.CLOSED:
            return
        try:
            if clean:
                self.stores.flush()
                self.checkpoint(force=True)
            self.stores.close()
        finally:
            self.state = TaskState.CLOSED

    def __repr__(self) -> str:
        return f"StandbyTask({self.id}{', warmup' if self.warmup else ''}, {self.state.value})"
