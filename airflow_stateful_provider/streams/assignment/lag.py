"""Task lag: how far a client's copy of a task's state is behind the changelogs (docs/semantics.md §3).

Why sums: a task may have several changelog partitions; each client reports one number
per task (the sum of the offsets its stores have applied) and the leader compares it with
the sum of the live end offsets. The difference is the number of records the client would
have to restore, which is what "caught up" is measured in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

__all__ = [
    "LATEST_OFFSET",
    "NO_STATE_LAG",
    "UNKNOWN_OFFSET_SUM",
    "compute_lag",
    "compute_task_lags",
    "is_caught_up",
]

#: Offset sum (and lag) a client reports for a task it runs as a RUNNING active: it is as
#: caught up as anyone can be ("latest").
LATEST_OFFSET = -2
#: Offset sum reported when a client has state for the task but cannot tell how much.
UNKNOWN_OFFSET_SUM = -3
#: Lag used for a task the client has no lag entry for at all ("no state"): larger than any
#: real lag (Kafka Streams' tests use ``Long.MAX_VALUE`` the same way).
NO_STATE_LAG = 2**63 - 1

T = TypeVar("T")


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return value


def compute_lag(reported_offset_sum: int | None, end_offset_sum: int) -> int:
    """Lag of one client on one task from its reported offset sum and the live end-offset sum.

    ``LATEST_OFFSET`` (-2) stays -2; an absent or ``UNKNOWN_OFFSET_SUM`` report means the
    whole changelog must be replayed (lag = end sum); a report beyond the end sum means the
    local state is not a prefix of the changelog (e.g. the topic was recreated), so it is
    treated as having to restore everything too; otherwise lag = end sum - reported sum.
    Example with end sum 100: -2 -> -2, None -> 100, 90 -> 10, 150 -> 100.
    """
    end = _check_int("end_offset_sum", end_offset_sum)
    if end < 0:
        raise ValueError(f"end_offset_sum must be >= 0, got {end}")
    if reported_offset_sum is None:
        return end
    reported = _check_int("reported_offset_sum", reported_offset_sum)
    if reported == LATEST_OFFSET:
        return LATEST_OFFSET
    if reported == UNKNOWN_OFFSET_SUM:
        return end
    if reported < 0:
        raise ValueError(
            f"reported_offset_sum must be >= 0, {LATEST_OFFSET} (latest) or "
            f"{UNKNOWN_OFFSET_SUM} (unknown), got {reported}"
        )
    if reported > end:
        return end
    return end - reported


def compute_task_lags(
    reported_offset_sums: Mapping[T, int], end_offset_sums: Mapping[T, int]
) -> dict[T, int]:
    """One client's lag on every stateful task, the leader side of Kafka Streams' ``computeTaskLags``.

    ``end_offset_sums`` holds every stateful task of the topology; tasks the client did not
    report get lag = end sum. Reports for tasks that are not (or no longer) stateful tasks of
    the topology are ignored, as Kafka Streams does.
    """
    return {
        task: compute_lag(reported_offset_sums.get(task), end)
        for task, end in end_offset_sums.items()
    }


def is_caught_up(lag: int, acceptable_recovery_lag: int) -> bool:
    """True when a client may take over a task without a long restore: running active, or lag in bounds."""
    return lag == LATEST_OFFSET or 0 <= lag <= acceptable_recovery_lag
