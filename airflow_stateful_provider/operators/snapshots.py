"""``SnapshotRetentionOperator``: list an application's store snapshots and delete all but
the newest K per task (docs/snapshots.md), next to the store maintenance operators.

Instances already apply retention after each upload; this operator is for what they
cannot do: an application that is stopped or shrank (tasks no instance runs any more),
a lower K, or an audit of what is there (``dry_run=True``). Deleting never breaks a
restore: a restore verifies its downloaded copy, and skips a snapshot deleted under it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_stateful_provider.hooks.snapshot_storage import get_snapshot_storage_options
from airflow_stateful_provider.operators.maintenance_report import utc_text

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["SnapshotRetentionOperator"]


class SnapshotRetentionOperator(BaseOperator):
    """Keep the newest ``keep`` complete snapshots of each task of ``application_id``.

    :param application_id: the application (templated).
    :param snapshot_url: the snapshot location (templated), as in the streams config.
    :param keep: snapshots kept per task (>= 1).
    :param snapshot_conn_id: Airflow connection of the location (``aws``, or any type whose
        extra holds ``storage_options``); None: no options (``file://``, ambient credentials).
    :param streams_task: only this streams task (e.g. ``"0_3"``); None: every task.
    :param dry_run: list what would be deleted, delete nothing.

    Returns (XCom) ``{"snapshots": [...], "deleted": [...]}``: every snapshot as listed before
    deleting (task, id, taken_at, size, offsets, problem) and the ids deleted.
    """

    template_fields: Sequence[str] = ("application_id", "snapshot_url", "snapshot_conn_id", "streams_task")
    ui_color = "#e8f0d8"

    def __init__(self, *, application_id: str, snapshot_url: str, keep: int, snapshot_conn_id: str | None = None,
                 streams_task: str | None = None, dry_run: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an int >= 1, got {keep!r}")
        self.application_id = application_id
        self.snapshot_url = snapshot_url
        self.keep = keep
        self.snapshot_conn_id = snapshot_conn_id
        self.streams_task = streams_task
        self._dry_run = dry_run  # not self.dry_run: that is BaseOperator's dry_run() method
        self._deleted_any = False

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_stateful_provider.streams.errors import SnapshotError
        from airflow_stateful_provider.streams.snapshots.catalog import delete_old_snapshots, list_snapshots
        from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage

        try:
            options = get_snapshot_storage_options(self.snapshot_conn_id) if self.snapshot_conn_id else {}
            storage = SnapshotStorage(self.snapshot_url, options)
            entries = list_snapshots(storage, self.application_id, self.streams_task)
            deleted = delete_old_snapshots(storage, self.application_id, self.keep, task_id=self.streams_task,
                                           dry_run=self._dry_run)
        except (ValueError, SnapshotError, OSError) as exc:
            raise AirflowException(f"snapshots of {self.application_id!r} at {self.snapshot_url}: {exc}") from exc
        gone = {(d.task_id, d.snapshot_id) for d in deleted}
        self._deleted_any = bool(gone) and not self._dry_run
        verb = "would delete" if self._dry_run else "deleted"
        now = time.time_ns() // 1_000_000
        lines = [f"{len(entries)} snapshot(s) of {self.application_id} at {self.snapshot_url}; {verb} {len(gone)}, "
                 f"keeping the newest {self.keep} per task"]
        for e in entries:
            action = verb if (e.task_id, e.snapshot_id) in gone else "keep"
            size = "-" if e.total_bytes is None else f"{e.total_bytes:,} B"
            lines.append(f"  {e.task_id}  {e.snapshot_id}  taken {utc_text(e.taken_at)} UTC "
                         f"({(now - e.taken_at) // 60_000} min ago)  {size}  {action}"
                         + (f"  ({e.problem})" if e.problem else ""))
        self.log.info("%s", "\n".join(lines))
        return {"snapshots": [e.as_dict() for e in entries],
                "deleted": [{"task_id": d.task_id, "snapshot_id": d.snapshot_id} for d in deleted],
                "dry_run": self._dry_run}

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Input: the application's snapshots at the location; output: the same, when
        snapshots were deleted."""
        from airflow_stateful_provider.operators.lineage import location_dataset, operator_lineage

        snapshots = location_dataset(f"{self.snapshot_url.rstrip('/')}/{self.application_id}")
        return operator_lineage(inputs=[snapshots], outputs=[snapshots] if self._deleted_any else [])
