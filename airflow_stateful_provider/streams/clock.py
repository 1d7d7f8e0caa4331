"""The wall clock, in epoch milliseconds: the one the engine stamps and compares times with.

Changelog record timestamps, status documents, control commands, probing rebalance times and
wall-clock punctuation all read it. Components that need a clock take it as a parameter
defaulting to :func:`wall_clock_ms`, so tests pass their own.
"""

from __future__ import annotations

import time

__all__ = ["wall_clock_ms"]


def wall_clock_ms() -> int:
    """Milliseconds since the epoch (integer arithmetic: no float rounding)."""
    return time.time_ns() // 1_000_000
