"""The spark-submit application as an OS process, for the tests and the benchmarks.

``SparkApplication`` runs ``spark-submit --master <local[...] or spark://...> airflow_stateful_provider/spark/app.py``
with its stdout and stderr in ``work_dir/<name>.log`` and parses the supervisor's
``STATEFUL-STREAMS {json}`` event lines from it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from airflow_stateful_provider.spark.app import EVENT_PREFIX
from tools.spark_cluster import spark_submit, submit_environment
from tools.waits import wait_until

REPO_ROOT = Path(__file__).resolve().parent.parent
APP = REPO_ROOT / "airflow_stateful_provider" / "spark" / "app.py"


def read_events(log_path: Path, kind: str | None = None) -> list[dict]:
    """The supervisor's ``STATEFUL-STREAMS {json}`` events in a driver log, oldest first."""
    if not log_path.exists():
        return []
    # An event is one write, but Spark copies its Python workers' stderr into the same output
    # in chunks that need not end at a line end: an event may follow a partial line.
    events = [json.loads(line[line.index(EVENT_PREFIX) + len(EVENT_PREFIX):])
              for line in log_path.read_text(errors="replace").splitlines() if EVENT_PREFIX in line]
    return [e for e in events if kind is None or e["event"] == kind]


class SparkApplication:
    def __init__(self, topology: str, config: dict[str, Any], work_dir: Path, *, instances: int,
                 master: str | None = None, name: str = "app", extra_args: list[str] | None = None,
                 spark_conf: dict[str, str] | None = None, env: dict[str, str] | None = None) -> None:
        self.topology = topology
        self.config = config
        self.work_dir = Path(work_dir)
        self.instances = instances
        self.master = master or f"local[{instances + 1},2]"
        self.name = name
        self.extra_args = list(extra_args or [])
        self.spark_conf = {"spark.ui.enabled": "false", "spark.driver.memory": "512m", **(spark_conf or {})}
        #: Extra environment of spark-submit (what the Airflow operator passes as ``env_vars``).
        self.env = dict(env or {})
        self.log_path = self.work_dir / f"{name}.log"
        self.process: subprocess.Popen | None = None
        self.submitted_at: float | None = None

    def start(self) -> SparkApplication:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.work_dir / f"{self.name}.json"
        config_path.write_text(json.dumps(self.config))
        env = {**submit_environment(), "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **self.env}
        conf = [arg for key, value in self.spark_conf.items() for arg in ("--conf", f"{key}={value}")]
        command = [spark_submit(), "--master", self.master, *conf, str(APP), "--topology", self.topology,
                   "--config", str(config_path), "--instances", str(self.instances), *self.extra_args]
        self.submitted_at = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT,
                                            start_new_session=True)
        return self

    def events(self, kind: str | None = None) -> list[dict]:
        return read_events(self.log_path, kind)

    def wait_for_event(self, kind: str, timeout: float, predicate=lambda event: True) -> dict:
        found: list[dict] = []

        def seen() -> bool:
            self.check_running(allow_exit=kind == "supervisor_finished")
            found.extend(e for e in self.events(kind) if predicate(e))
            return bool(found)

        wait_until(seen, timeout, f"event {kind!r} from the Spark application", self.log_tail)
        return found[0]

    @property
    def driver_pid(self) -> int:
        return self.wait_for_event("driver_started", 120)["pid"]

    def check_running(self, allow_exit: bool = False) -> None:
        if self.process is not None and self.process.poll() is not None and not allow_exit:
            raise AssertionError(f"spark-submit exited with {self.process.returncode}\n{self.log_tail()}")

    def terminate_driver(self) -> None:
        """SIGTERM to the Python driver (the supervisor), as a scheduler stopping the job would."""
        os.kill(self.driver_pid, signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"spark-submit still running after {timeout}s\n{self.log_tail()}") from None

    def kill(self) -> None:
        """Tear down everything spark-submit started (its own process group)."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(30)

    def log_tail(self, lines: int = 80) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
