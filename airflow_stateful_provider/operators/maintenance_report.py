"""What a maintenance run reports: one row per store, as a table for the task log and as
JSON-ready data for XCom."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["json_ready", "result_table", "utc_text"]


def utc_text(ms: Any) -> str:
    """Epoch ms as ``YYYY-MM-DD HH:MM:SS`` in UTC; "-" when unknown."""
    if not isinstance(ms, int):
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


def _summary(result: Mapping[str, Any] | None) -> str:
    """One line for one store's result (retention, compaction or skipped)."""
    if not isinstance(result, Mapping):
        return repr(result)
    if "skipped" in result:
        return f"skipped: {result['skipped']}"
    if "segments_dropped" in result:
        dropped = result.get("segments_dropped") or []
        ids = [s.get("segment_id") for s in dropped if isinstance(s, Mapping)]
        which = "" if not ids else (f" ({ids[0]})" if len(ids) == 1 else f" ({ids[0]}..{ids[-1]})")
        ttl = result.get("min_live_segment", 0) is None  # a key-value store's time to live: keys
        what = f"dropped {len(dropped)} segment(s){which}"
        if ttl:
            what = f"expired {result.get('rows_dropped', 0)} key(s)"
        elif result.get("rows_dropped"):
            what += f" holding {result['rows_dropped']} row(s)"
        parts = [what,
                 f"stream time {utc_text(result.get('observed_stream_time_before'))}"
                 f" -> {utc_text(result.get('observed_stream_time_after'))}"]
        if "rows_before" in result:
            parts.append(f"rows ~{result['rows_before']} -> ~{result.get('rows_after')}")
        if "segments_before" in result and not ttl:
            parts.append(f"segments {result['segments_before']} -> {result.get('segments_after')}")
        parts.append(f"{_bytes(result.get('bytes_before'))} -> {_bytes(result.get('bytes_after'))}")
        if "changelog_records_written" in result:
            parts.append(f"{result['changelog_records_written']} changelog record(s) written")
        return "; ".join(parts)
    if "duration_s" in result:
        before, after = result.get("bytes_before"), result.get("bytes_after")
        reclaimed = f" (reclaimed {_bytes(before - after)})" \
            if isinstance(before, int) and isinstance(after, int) and before > after else ""
        return f"{_bytes(before)} -> {_bytes(after)}{reclaimed} in {float(result['duration_s']):.2f}s"
    return json.dumps(result, sort_keys=True)


def result_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per store: INSTANCE TASK STORE ROLE RESULT (offline rows have no instance or role)."""
    if not rows:
        return "(no store)"
    header = ("INSTANCE", "TASK", "STORE", "ROLE", "RESULT")
    body = [(r.get("instance") or "-", r.get("task_id") or "-", r.get("store") or "-", r.get("role") or "-",
             _summary(r.get("result"))) for r in rows]
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header) - 1)]
    return "\n".join("  ".join([*(str(c).ljust(w) for c, w in zip(row[:-1], widths, strict=True)), str(row[-1])])
                     for row in [header, *body])


def json_ready(value: Any) -> Any:
    return json.loads(json.dumps(value))
