"""Waiting in tests, benchmarks and the demo: the one place for it.

:func:`wait_progressing` (and :func:`wait_for_commits` built on it) waits for work to finish
on a measure of its progress (records committed, output read, changelog records restored),
failing when that measure stalls rather than at a deadline near the normal run time, so a
busy machine slows a test down without failing it. :func:`wait_until` is for events that take
a bounded time whatever the load (a process starting, a rebalance, a fake's thread).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.instances import InstanceProcess

#: How the waits name the usual progress measure of an application (see wait_for_commits).
COMMITTED_AND_RESTORED = "committed offsets + restored changelog records"


def wait_until(condition: Callable[[], bool], timeout: float, what: str, on_timeout: Callable[[], str] = lambda: "",
               interval: float = 0.25) -> float:
    """Poll ``condition`` until true; returns the seconds waited. On timeout raises
    AssertionError naming ``what`` with ``on_timeout()``'s context."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{on_timeout()}")
        time.sleep(interval)
    return time.monotonic() - started


def wait_progressing(done: Callable[[], bool], progress: Callable[[], float], what: str, *,
                     measure: str = "progress", stall: float = 60.0, cap: float = 1800.0,
                     context: Callable[[], str] = lambda: "", interval: float = 0.25) -> float:
    """Poll ``done`` until true; returns the seconds waited.

    ``progress()`` (called right after each ``done()`` that returned False, so it may reuse
    what ``done`` read) measures the work as it advances: records committed, output records
    read, changelog records restored. The wait fails with AssertionError only when that
    measure has not grown for ``stall`` seconds, naming ``what``, the ``measure`` with the
    last value seen and ``context()`` (the instances' logs): a hang fails within ``stall``
    seconds, a slow machine only waits longer. ``cap`` bounds the whole wait, a safety net
    for work that crawls on without ever finishing.
    """
    started = last_growth = time.monotonic()
    first = best = None
    while not done():
        now = time.monotonic()
        value = progress()
        if best is None or value > best:
            if best is None:
                first = value
            best, last_growth = value, now
        elif now - last_growth > stall:
            raise AssertionError(
                f"no progress for {stall:g}s waiting for {what}: {measure} stayed at {best} since "
                f"{last_growth - started:.0f}s into the wait (it was {first} at the start)\n{context()}")
        if now - started > cap:
            raise AssertionError(
                f"gave up after {cap:g}s waiting for {what}, still progressing: {measure} went from {first} to "
                f"{best}\n{context()}")
        time.sleep(interval)
    return time.monotonic() - started


def wait_for_commits(committed: Callable[[], Mapping[int, int]], target: Mapping[int, int] | int, what: str,
                     instances: Sequence[InstanceProcess] = (), *, stall: float = 60.0, cap: float = 1800.0,
                     context: Callable[[], str] | None = None) -> float:
    """Until the offsets ``committed()`` returns (by partition) reach ``target``: every
    partition's offset in a mapping, or a total. Progress: the committed total plus the
    changelog records ``instances`` restored; each of them must keep running meanwhile.
    Fails as :func:`wait_progressing` does, with the offsets seen and the instances' logs."""
    seen: dict[int, int] = {}

    def done() -> bool:
        for instance in instances:
            instance.check_alive()
        seen.clear()
        seen.update(committed())
        if isinstance(target, int):
            return sum(seen.values()) >= target
        return all(seen.get(partition, 0) >= offset for partition, offset in target.items())

    def progress() -> int:
        return sum(seen.values()) + sum(instance.restored_records() for instance in instances)

    def describe() -> str:
        logs = context() if context is not None else "\n".join(
            f"----- {instance.name}\n{instance.log_tail()}" for instance in instances)
        return f"committed offsets {dict(sorted(seen.items()))}, target {target}\n{logs}"

    return wait_progressing(done, progress, what, measure=COMMITTED_AND_RESTORED,
                            stall=stall, cap=cap, context=describe, interval=0.5)
