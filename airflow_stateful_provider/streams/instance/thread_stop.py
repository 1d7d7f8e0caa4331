"""Waiting for stream threads to stop, and naming the ones that do not.

A stream thread told to stop finishes its iteration, commits and closes its tasks; every
Kafka call on the way has its own bound. What has none is user code (a processor or a
punctuator that blocks) or a RocksDB write stall. So a wait for threads to stop reports,
every REPORT_EVERY_S, each thread still running and the code it is in; and the waits the
instance makes on its own (the error shutdown) end at a deadline, never silently.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Iterable

__all__ = ["REPORT_EVERY_S", "join_threads", "thread_location"]

log = logging.getLogger(__name__)

#: While threads do not stop, a warning names them this often.
REPORT_EVERY_S = 30.0


def thread_location(thread: threading.Thread, depth: int = 4) -> str:
    """Where ``thread`` runs now: its innermost ``depth`` frames, innermost first, as
    ``file:line in function`` (enough to get past a wait's library frames to its caller);
    "" when it runs no Python code (ended, or not started)."""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    if frame is None:
        return ""
    frames = traceback.extract_stack(frame)[-depth:]
    return " <- ".join(f"{entry.filename.rsplit('/', 1)[-1]}:{entry.lineno} in {entry.name}"
                       for entry in reversed(frames))


def join_threads(threads: Iterable[threading.Thread], deadline: float | None, what: str, *,
                 report_every_s: float = REPORT_EVERY_S) -> list[threading.Thread]:
    """Join ``threads`` until all ended or ``deadline`` (``time.monotonic()``; None: no bound)
    passed. Every ``report_every_s`` a warning names each thread still running, where it is,
    and ``what`` the wait is for. Returns the threads still running."""
    started = time.monotonic()
    pending = [t for t in threads if t.ident is not None]  # a thread never started never ends
    next_report = started + report_every_s
    while True:
        pending = [t for t in pending if t.is_alive()]
        now = time.monotonic()
        if not pending or (deadline is not None and now >= deadline):
            return pending
        if now >= next_report:
            for thread in pending:
                log.warning("%s: thread %s still running after %.0f s, in %s", what, thread.name, now - started,
                            thread_location(thread) or "no Python code")
            next_report = now + report_every_s
        wake = next_report if deadline is None else min(next_report, deadline)
        pending[0].join(max(0.0, wake - now))
