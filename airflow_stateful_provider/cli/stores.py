"""``stateful-streams stores``: the state stores found in a state directory, opened read-only
(so it works while the application runs), one row each; a store the engine refuses is a row
with its reason."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, TextIO


def run_stores(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.errors import StreamsError
    from airflow_stateful_provider.streams.state.common.metadata import METADATA_FILE_NAME
    from airflow_stateful_provider.streams.state.store_dir import find_stores, find_unrecognized_stores, open_store

    problem = _state_dir_problem(args.state_dir)
    if problem is not None:
        print(f"error: state directory {args.state_dir!r} {problem}", file=sys.stderr)
        return 1
    rows: list[dict[str, Any]] = []
    failures = 0
    # A RocksDB directory without store metadata is a store the engine refuses: listed with the
    # engine's reason, never skipped as if the directory were empty.
    for path in sorted(find_stores(args.state_dir) + find_unrecognized_stores(args.state_dir)):
        try:
            store = open_store(path, read_only=True)
            try:
                stats = store.stats()
            finally:
                store.close()
        except Exception as exc:  # noqa: BLE001 - one store the engine refuses is a row, not the end
            failures += 1
            message = str(exc) if isinstance(exc, (StreamsError, OSError)) else f"{type(exc).__name__}: {exc}"
            rows.append({"path": os.path.relpath(path, args.state_dir), "error": " ".join(message.split())})
            continue
        rows.append({
            "path": os.path.relpath(path, args.state_dir), "type": stats.store_type,
            "bytes_on_disk": stats.bytes_on_disk, "entries_estimate": stats.approximate_num_entries,
            "live_segments": len(stats.live_segments), "retention_ms": stats.retention_ms,
            "observed_stream_time": stats.observed_stream_time,
        })
    if args.json:
        out.write(json.dumps(rows, indent=2) + "\n")
    elif rows:
        out.write(_stores_table(rows) + "\n")
    out.flush()
    if not rows:
        print(f"error: no state store under {args.state_dir}: a state directory holds "
              f"<application_id>/<task>/<store>/ with a {METADATA_FILE_NAME} in each store (give the "
              f"state_dir of a stateful-streams instance, or one store's directory)", file=sys.stderr)
        return 1
    if failures:
        print(f"error: {failures} of {len(rows)} store(s) under {args.state_dir} cannot be opened (their "
              f"rows say why)", file=sys.stderr)
    return 1 if failures else 0


def _state_dir_problem(path: str) -> str | None:
    """Why ``path`` cannot be listed as a state directory, or None."""
    if not os.path.exists(path):
        return "does not exist"
    if not os.path.isdir(path):
        return "is not a directory (give the state_dir, which holds <application_id>/<task>/<store>)"
    try:
        os.listdir(path)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    return None


def _stores_table(rows: list[dict[str, Any]]) -> str:
    header = ("store", "type", "on disk", "entries~", "segments", "retention", "stream time")
    lines = [header]
    for row in rows:
        if "error" in row:
            lines.append((row["path"], "ERROR", row["error"], "", "", "", ""))
            continue
        lines.append((row["path"], row["type"], size_text(row["bytes_on_disk"]), str(row["entries_estimate"]),
                      str(row["live_segments"]), _duration(row["retention_ms"]),
                      _timestamp(row["observed_stream_time"])))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 3_600_000:g} h" if ms >= 3_600_000 else f"{ms / 60_000:g} min" if ms >= 60_000 else f"{ms} ms"


def _timestamp(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + " UTC"
