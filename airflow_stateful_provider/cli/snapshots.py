"""``stateful-streams snapshots``: the store snapshots of an application on shared storage
(docs/snapshots.md), and the deletion of all but the newest K per task."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

from airflow_stateful_provider.cli.kafka_settings import json_object_file
from airflow_stateful_provider.cli.stores import size_text


def run_snapshots(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.errors import ConfigError, SnapshotError
    from airflow_stateful_provider.streams.snapshots.catalog import (
        SNAPSHOT_STORAGE_OPTIONS_ENV,
        delete_old_snapshots,
        list_snapshots,
        storage_options_from_env,
    )
    from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
    from airflow_stateful_provider.streams.status.readable import age_text

    if args.storage_options:
        options = json_object_file(args.storage_options, "--storage-options", "fsspec storage options")
    else:
        try:
            options = storage_options_from_env()
        except SnapshotError as exc:
            raise ConfigError(str(exc)) from None
    storage = SnapshotStorage(args.snapshot_url, options)
    try:
        missing = _missing_snapshots(storage, args.application_id, args.task)
        if missing is not None:
            print(f"error: {missing}", file=sys.stderr)
            return 1
        if args.action == "delete":
            deleted = delete_old_snapshots(storage, args.application_id, args.keep, task_id=args.task,
                                           dry_run=not args.execute)
        else:
            entries = list_snapshots(storage, args.application_id, args.task)
    except SnapshotError:
        raise
    except Exception as exc:  # a storage library's error (credentials, network) named in one line
        raise SnapshotError(f"cannot read snapshots at {args.snapshot_url}: {type(exc).__name__}: {exc} (check the "
                            f"URL, and the storage options in --storage-options or "
                            f"${SNAPSHOT_STORAGE_OPTIONS_ENV}: credentials, endpoint)") from exc
    if args.action == "delete":
        verb = "deleted" if args.execute else "would delete"
        if args.json:
            out.write(json.dumps({"executed": args.execute, "deleted": [d.as_dict() for d in deleted]},
                                 indent=2) + "\n")
        else:
            for info in deleted:
                out.write(f"{verb} {info.task_id}/{info.snapshot_id}{'' if info.complete else ' (partial)'}\n")
            out.write(f"{verb} {len(deleted)} snapshot(s); kept the newest {args.keep} of each task\n")
            if deleted and not args.execute:
                out.write("nothing deleted yet: run again with --execute to delete them\n")
        return 0
    if args.json:
        out.write(json.dumps([e.as_dict() for e in entries], indent=2) + "\n")
        return 0
    if not entries:
        out.write(f"no snapshots of {args.application_id} at {args.snapshot_url}\n")
        return 0
    now = time.time() * 1000
    lines = [("TASK", "SNAPSHOT", "AGE", "SIZE", "OFFSETS", "PROBLEM")]
    for e in entries:
        offsets = ", ".join(f"{store}@{offset}" for store, offset in sorted(e.offsets.items())) or "-"
        lines.append((e.task_id, e.snapshot_id, age_text(int(now - e.taken_at)), "-" if e.total_bytes is None
                      else size_text(e.total_bytes), offsets, e.problem or ""))
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out.write("\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                        for line in lines) + "\n")
    return 0


def _missing_snapshots(storage: Any, application_id: str, task_id: str | None) -> str | None:
    """Why there is nothing to list (a location, application or task that does not exist,
    most likely a typo), or None. An application whose directory exists but is empty has none."""
    if not storage.exists():
        return f"snapshot location {storage.url} does not exist (check the URL)"
    tasks = storage.list_tasks(application_id)
    applications = [] if tasks else storage.list_applications()
    if not tasks and application_id not in applications:
        shown = ", ".join(applications[:10]) + (f" and {len(applications) - 10} more" if len(applications) > 10 else "")
        return (f"no snapshots of application {application_id!r} at {storage.url} "
                f"(applications there: {shown or 'none'})")
    if task_id is not None and task_id not in tasks:
        return f"no snapshots of task {task_id} of application {application_id!r} at {storage.url} (tasks: {tasks})"
    return None
