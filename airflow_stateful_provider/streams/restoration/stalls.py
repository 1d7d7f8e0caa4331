"""RestorationStalls: an active restoration that stands still is reported, once per standstill.

A restoration reads on as long as the changelog's records arrive. When its position has not
moved for STALLED_RESTORE_SECONDS the instance logs one WARNING naming the task, the
partition, where it stands and the likely cause: under exactly-once a transaction open on
the changelog (the restore consumer reads committed records only and waits until it is
committed or aborted), otherwise records that do not arrive. Moving again re-arms it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Hashable

__all__ = ["STALLED_RESTORE_SECONDS", "RestorationStalls"]

log = logging.getLogger(__name__)

#: An active restoration whose position has not moved for this long is reported (once).
STALLED_RESTORE_SECONDS = 30.0


@dataclasses.dataclass
class _Standstill:
    position: int
    since: float
    reported: bool = False


class RestorationStalls:
    """Watches the positions of active restorations (see module docstring)."""

    def __init__(self, *, exactly_once: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self._exactly_once = exactly_once
        self._clock = clock
        self._seen: dict[Hashable, _Standstill] = {}

    def check(self, restoring: dict[Hashable, tuple[object, int, int]]) -> None:
        """``restoring``: every changelog partition an active task still restores -> (task id,
        position, end offset). Partitions no longer given are forgotten."""
        now = self._clock()
        self._seen = {tp: seen for tp, seen in self._seen.items() if tp in restoring}
        for tp, (task_id, position, end) in restoring.items():
            seen = self._seen.get(tp)
            if seen is None or seen.position != position:
                self._seen[tp] = _Standstill(position, now)
            elif not seen.reported and now - seen.since >= STALLED_RESTORE_SECONDS:
                seen.reported = True
                why = ("a transaction is open on the changelog there (committed records only are read: the task "
                       "waits until it is committed, or aborted by its producer's successor or by the transaction "
                       "coordinator within the transaction timeout)" if self._exactly_once else
                       "no records arrive (is the partition's leader reachable?)")
                log.warning("task %s: restoring %s has not moved for %.0f s at offset %d of %d: %s", task_id, tp,
                            now - seen.since, position, end, why)
