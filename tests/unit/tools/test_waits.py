"""tools/waits.py, the waits on progress: slow work that keeps moving is waited for past
any stall limit, a hang fails within the stall limit naming what was last seen."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tools.local_processes import process_cpu_seconds
from tools.waits import wait_for_commits, wait_progressing


class _Work:
    """Work that advances one step per ``step_every`` seconds up to ``steps``, or stops at ``hang_at``."""

    def __init__(self, steps: int, step_every: float, hang_at: int | None = None) -> None:
        self.steps, self.step_every, self.hang_at = steps, step_every, hang_at
        self.started = time.monotonic()

    def done_steps(self) -> int:
        done = min(self.steps, int((time.monotonic() - self.started) / self.step_every))
        return done if self.hang_at is None else min(done, self.hang_at)

    def finished(self) -> bool:
        return self.done_steps() >= self.steps


def test_work_slower_than_the_stall_limit_in_all_is_waited_for_while_it_moves():
    work = _Work(steps=8, step_every=0.05)
    waited = wait_progressing(work.finished, work.done_steps, "the slow work", stall=0.2, interval=0.01)
    assert waited >= 0.35  # beyond the stall limit: only a stall fails
    assert work.finished()


def test_a_hang_fails_after_the_stall_limit_with_the_last_value_and_the_context():
    work = _Work(steps=100, step_every=0.02, hang_at=3)
    started = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        wait_progressing(work.finished, work.done_steps, "the stuck work", measure="steps done", stall=0.3,
                         context=lambda: "instance logs here", interval=0.01)
    assert 0.3 <= time.monotonic() - started < 5
    message = str(failure.value)
    assert message.startswith("no progress for 0.3s waiting for the stuck work: steps done stayed at 3")
    assert "instance logs here" in message


def test_the_cap_ends_work_that_crawls_on_without_finishing():
    work = _Work(steps=10**9, step_every=0.01)
    with pytest.raises(AssertionError, match=r"gave up after 0.3s waiting for endless work, still progressing"):
        wait_progressing(work.finished, work.done_steps, "endless work", stall=5, cap=0.3, interval=0.01)


def test_wait_for_commits_reaches_every_partition_or_a_total():
    polls = iter([{0: 1}, {0: 5, 1: 2}, {0: 10, 1: 7}])
    assert wait_for_commits(lambda: next(polls), {0: 10, 1: 7}, "both partitions", stall=5) >= 0
    polls = iter([{0: 1}, {0: 5, 1: 4}])
    wait_for_commits(lambda: next(polls), 9, "nine records", stall=5)


def test_wait_for_commits_fails_on_offsets_that_stop_naming_them():
    with pytest.raises(AssertionError) as failure:
        wait_for_commits(lambda: {0: 4, 1: 2}, {0: 10, 1: 7}, "every record", stall=0.5)
    message = str(failure.value)
    assert "waiting for every record: committed offsets + restored changelog records stayed at 6" in message
    assert "committed offsets {0: 4, 1: 2}, target {0: 10, 1: 7}" in message


def test_process_cpu_seconds_grows_while_a_process_computes():
    busy = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        first = process_cpu_seconds(child.pid)

        def cpu() -> float:
            return process_cpu_seconds(child.pid)

        wait_progressing(lambda: cpu() > first + 0.05, cpu, "CPU time to grow", stall=20, interval=0.02)
    finally:
        child.kill()
        child.wait()
    assert process_cpu_seconds(os.getpid()) > 0
