"""The cyclic garbage collector's thresholds for a process that runs stream threads.

Processing allocates several short-lived container objects per record (records, keys,
store rows) and keeps many long-lived ones (the record cache's entries, the clients'
metadata). With CPython's default thresholds (700, 10, 10) the collector runs a young
collection every few hundred records and a full one, traversing every live object, every
hundred young ones: about a tenth of a stream thread's CPU time on the sessionize
benchmark (docs/benchmarks.md). The engine makes almost no reference cycles, so its
garbage is freed by reference counting and rarer collections cost no memory to speak of.
"""

from __future__ import annotations

import gc
import logging

__all__ = ["STREAMS_GC_THRESHOLDS", "raise_gc_thresholds"]

log = logging.getLogger(__name__)

#: Lowest thresholds a process running stream threads uses: a young collection per 10,000
#: net container allocations, a full one after 50 x 100 young ones.
STREAMS_GC_THRESHOLDS = (10_000, 50, 100)


def raise_gc_thresholds() -> bool:
    """Raise the collector's thresholds to at least :data:`STREAMS_GC_THRESHOLDS` (higher
    ones set by the application stay; a disabled collector stays disabled). Returns whether
    anything changed."""
    current = gc.get_threshold()
    wanted = tuple(max(have, least) for have, least in zip(current, STREAMS_GC_THRESHOLDS, strict=False))
    if current[0] == 0 or wanted == current:  # threshold 0 disables collection: leave it
        return False
    gc.set_threshold(*wanted)
    log.debug("garbage collector thresholds %s -> %s", current, wanted)
    return True
