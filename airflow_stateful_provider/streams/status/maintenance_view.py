"""The last maintenance of every store copy, as the instances' status documents tell it.

Each instance answers the control commands ``enforce_retention`` and ``compact`` with a row
per store copy it holds (task, role, result) and keeps its last acknowledgements in its
status document. :func:`last_maintenance` reads them back: per (store, task, instance, role)
the newest retention and the newest compaction still listed. ``stateful-streams status`` and
the Airflow page show them (docs/maintenance.md, "Reading the results"). An instance that
restarted, or answered many commands since, no longer lists older runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from airflow_stateful_provider.streams.status.document_parts import CommandAcknowledgement

__all__ = ["MaintenanceSeen", "last_maintenance"]

RETENTION = "retention"
COMPACTION = "compaction"


class _Answering(Protocol):
    @property
    def instance_id(self) -> str: ...

    @property
    def acknowledgements(self) -> tuple[CommandAcknowledgement, ...]: ...


@dataclasses.dataclass(frozen=True)
class MaintenanceSeen:
    """One store copy's newest retention or compaction run (``what``), answered at ``at``."""

    store: str
    task_id: str
    instance_id: str
    role: str
    what: str
    at: int
    summary: str


def last_maintenance(instances: Iterable[_Answering]) -> list[MaintenanceSeen]:
    """Per (store, task, instance, role, what), the newest answered run, sorted by those."""
    latest: dict[tuple[str, str, str, str, str], MaintenanceSeen] = {}
    for instance in instances:
        for ack in instance.acknowledgements:
            rows = ack.result.get("stores") if ack.status == "done" and isinstance(ack.result, Mapping) else None
            if not isinstance(rows, list):
                continue
            for row in rows:
                if not isinstance(row, Mapping) or not isinstance(row.get("result"), Mapping):
                    continue
                what = _what(row["result"])
                if what is None:
                    continue
                seen = MaintenanceSeen(str(row.get("store")), str(row.get("task_id")), instance.instance_id,
                                       str(row.get("role")), what, ack.at, _summary(what, row["result"]))
                key = (seen.store, seen.task_id, seen.instance_id, seen.role, what)
                if key not in latest or latest[key].at <= seen.at:
                    latest[key] = seen
    return [latest[key] for key in sorted(latest)]


def _what(result: Mapping[str, Any]) -> str | None:
    if "now_ms" in result:
        return RETENTION
    if "duration_s" in result:
        return COMPACTION
    return None


def _summary(what: str, result: Mapping[str, Any]) -> str:
    size = f"{_bytes(result.get('bytes_before'))} -> {_bytes(result.get('bytes_after'))}"
    if what == COMPACTION:
        return size
    if result.get("min_live_segment", 0) is None:  # a key-value store's time to live
        dropped = f"expired {result.get('rows_dropped', 0)} key(s)"
    else:
        segments = len(result.get("segments_dropped") or ())
        dropped = f"dropped {segments} segment(s), {result.get('rows_dropped', 0)} row(s)"
    cutoff = result.get("cutoff_ms")
    return (f"as of {_utc(result.get('now_ms'))}: {dropped}; {size}; cut-off {_utc(cutoff)}; "
            f"{result.get('changelog_records_written', 0)} changelog record(s) written")


def _utc(ms: Any) -> str:
    if not isinstance(ms, int) or isinstance(ms, bool):
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _bytes(n: Any) -> str:
    if not isinstance(n, int) or isinstance(n, bool):
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} GiB"
