"""The arguments of the maintenance operators: mode, store names and the retention clock.

Checked when the DAG is parsed where they are literals, and again after templating; a bad
value fails naming it, before anything touches a store.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

__all__ = ["MODES", "check_mode", "is_template", "parse_now_ms", "parse_store_names"]

MODES = ("online", "offline")


def parse_now_ms(now: datetime | int | str | None, *, wall_clock_ms: int | None = None) -> int:
    """The time retention is measured against, as epoch ms.

    None: the wall clock (``wall_clock_ms``, else now). An int: epoch ms. A timezone-aware
    datetime. A string (what a template renders): digits are epoch ms, anything else an
    ISO-8601 timestamp with an offset (``2026-01-02T00:00:00+00:00``, ``...Z``). Naive
    datetimes are refused: a retention cut-off that depends on the worker's time zone is a
    silent data-loss bug.
    """
    if now is None or now == "":
        return wall_clock_ms if wall_clock_ms is not None else time.time_ns() // 1_000_000
    if isinstance(now, bool):
        raise ValueError(f"now must be a datetime, epoch milliseconds or an ISO-8601 string, got {now!r}")
    if isinstance(now, int):
        value = now
    elif isinstance(now, datetime):
        if now.tzinfo is None or now.utcoffset() is None:
            raise ValueError(f"now {now.isoformat()!r} has no time zone; give an aware datetime (UTC)")
        value = int(now.timestamp() * 1000)
    elif isinstance(now, str):
        text = now.strip()
        if text.lstrip("-").isdigit():
            value = int(text)
        else:
            try:
                parsed = datetime.fromisoformat(text)
            except ValueError:
                raise ValueError(f"now {now!r} is neither epoch milliseconds nor an ISO-8601 timestamp") from None
            return parse_now_ms(parsed)
    else:
        raise ValueError(f"now must be a datetime, epoch milliseconds or an ISO-8601 string, "
                         f"got {type(now).__name__} {now!r}")
    if value < 0:
        raise ValueError(f"now must be >= 0 epoch milliseconds, got {value}")
    return value


def parse_store_names(stores: str | Iterable[str] | None) -> tuple[str, ...] | None:
    """None (every session and versioned store), ``"a,b"`` or a list of store names."""
    if stores is None or stores == "":
        return None
    if isinstance(stores, str):
        names = [s.strip() for s in stores.split(",")]
    elif isinstance(stores, Iterable):
        names = list(stores)
    else:
        raise ValueError(f"stores must be None, a comma-separated string or a list of store names, got {stores!r}")
    if not names or any(not isinstance(n, str) or not n.strip() for n in names):
        raise ValueError(f"stores must name at least one store and hold only non-empty strings, got {stores!r}")
    return tuple(dict.fromkeys(n.strip() for n in names))


def is_template(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def check_mode(mode: Any) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    return mode
