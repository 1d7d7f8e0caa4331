"""Streams instances as OS processes, and what the tests and benchmarks observe of them.

Each instance is ``python -m airflow_stateful_provider.streams.runner`` with its config in
``work_dir/<name>.json``, its log in ``<name>.log`` and its restoration and standby events
in ``<name>.events.jsonl``. Waiting for them: tools/waits.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
#: After a stop timed out: time given to the stack dump before the process is killed, and
#: lines of log shown (a dump of some twenty threads runs to a few hundred lines).
STACK_DUMP_SECONDS = 2
STACK_DUMP_LINES = 400


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
        still running after ``timeout`` dumps its threads' stacks into its log (SIGUSR1, the
        runner's faulthandler), is killed, and TimeoutError is raised with the log tail."""
        if not self.alive():
            return self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGUSR1)
            try:
                self.process.wait(timeout=STACK_DUMP_SECONDS)  # the dump is written meanwhile
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
            raise TimeoutError(f"instance {self.name} did not stop within {timeout}s (its threads' stacks are "
                               f"at the end of the log):\n{self.log_tail(STACK_DUMP_LINES)}") from None

    def ensure_stopped(self) -> None:
        """Kill the process if it still runs (clean-up after a failure)."""
        if self.alive():
            self.kill()

