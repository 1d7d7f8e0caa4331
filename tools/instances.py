"""Streams instances as OS processes, and what the tests and benchmarks observe of them.

Each instance is ``python -m airflow_stateful_provider.streams.runner`` with its config in
``work_dir/<name>.json``, its log in ``<name>.log`` and its restoration and standby events
in ``<name>.events.jsonl``.

Waiting: :func:`wait_progressing` (and :func:`wait_for_commits` built on it) waits for work
to finish on a measure of its progress, failing when it stalls rather than at a deadline
near the normal run time, so a busy machine slows a test down without failing it;
:func:`wait_until` is for events that take a bounded time whatever the load.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
#: How the waits name the usual progress measure of an application (see wait_for_commits).
COMMITTED_AND_RESTORED = "committed offsets + restored changelog records"


class InstanceExitedError(AssertionError):
    """The instance process ended while it was expected to run (its log tail included)."""


class InstanceProcess:
    """One streams instance process (see module docstring)."""

    def __init__(self, topology: str, config: dict[str, Any], work_dir: Path, name: str) -> None:
        self.topology = topology
        self.config = config
        self.work_dir = Path(work_dir)
        self.name = name
        self.log_path = self.work_dir / f"{name}.log"
        self.events_path = self.work_dir / f"{name}.events.jsonl"
        self.process: subprocess.Popen | None = None

    def start(self) -> InstanceProcess:
        config_path = self.work_dir / f"{self.name}.json"
        config_path.write_text(json.dumps(self.config))
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "airflow_stateful_provider.streams.runner", "--topology", self.topology,
                 "--config", str(config_path), "--events-file", str(self.events_path)],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
        return self

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def events(self) -> list[dict]:
        """Restoration and standby events written so far (runner --events-file)."""
        if not self.events_path.exists():
            return []
        return [json.loads(line) for line in self.events_path.read_text().splitlines() if line.strip()]

    def restored_records(self, standbys: bool = False) -> int:
        """Changelog records its active tasks restored so far (restore_batch events): the
        progress of an instance that restores before it processes; with ``standbys`` the
        records its standby tasks applied too."""
        kinds = ("restore_batch", "standby_batch") if standbys else ("restore_batch",)
        return sum(e.get("count", 0) for e in self.events() if e["event"] in kinds)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        """Raise InstanceExitedError, with the log tail, if the process has ended."""
        if not self.alive():
            code = None if self.process is None else self.process.returncode
            raise InstanceExitedError(f"instance {self.name} exited with {code}:\n{self.log_tail()}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (the instance commits, checkpoints and leaves the group) and wait; a process
        still running after ``timeout`` is killed and TimeoutError raised with its log tail."""
        if not self.alive():
            return self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
            raise TimeoutError(f"instance {self.name} did not stop within {timeout}s:\n{self.log_tail()}") from None

    def ensure_stopped(self) -> None:
        """Kill the process if it still runs (clean-up after a failure)."""
        if self.alive():
            self.kill()


def committed_offsets(admin: Any, group: str, topic: str) -> dict[int, int]:
    """The offsets ``group`` committed for ``topic``, by partition, read with a kafka-python
    admin client; empty while the group coordinator is still being set up."""
    from kafka.errors import KafkaError

    try:
        offsets = admin.list_group_offsets({group: None}).get(group, {})
    except KafkaError as exc:
        if not exc.retriable:
            raise
        return {}
    return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic and om.offset >= 0}


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


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a running process has used (Linux /proc): the progress of
    a child that only computes."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
