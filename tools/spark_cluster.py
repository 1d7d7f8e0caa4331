"""A real Spark standalone cluster on loopback (a Master and Workers), for tests, the demo and
developers.

It runs the Master and Worker daemons of the pyspark distribution installed in the project's
environment (``spark-class``), so it needs nothing beyond ``make`` and Java. Sized for a small
machine: each Worker offers ``cores`` task slots (a count of slots, not of CPUs: an instance
mostly waits on Kafka) and ``memory`` for its executors; the daemons themselves get a small
heap.

From Python::

    with LocalSparkCluster(workers=2) as cluster:
        print(cluster.master_url)        # spark://127.0.0.1:<port>

From a shell (``make spark-cluster-start`` / ``make spark-cluster-stop`` use this)::

    python -m tools.spark_cluster start --dir .local/spark     # prints the master URL
    python -m tools.spark_cluster stop --dir .local/spark

Each Worker keeps its executors' work and local directories under ``<dir>/worker-<n>/``, so
an instance's state directory (``<local dir>/stateful-streams/<instance id>``) is on that
Worker's disk, as on a real cluster.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tools.kafka.broker import require_java
from tools.local_processes import die_with_parent, free_loopback_port, own_process_group, terminate, wait_pid

DAEMON_HEAP = "256m"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class SparkClusterError(RuntimeError):
    """The local Spark cluster could not be started or stopped."""


def spark_home() -> Path:
    """The pyspark distribution of this interpreter (its ``bin/spark-class`` and ``jars/``),
    found without importing pyspark (tests/conftest.py asks in every pytest process)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SparkClusterError(f"pyspark is not installed for {sys.executable}: install the project "
                                f"(make test, or pip install -e .)")
    return Path(spec.origin).resolve().parent


def spark_submit() -> str:
    """This interpreter's pyspark ``spark-submit`` (next to its python)."""
    return str(Path(sys.executable).parent / "spark-submit")


def submit_environment() -> dict[str, str]:
    """The environment the tools run spark-submit in: this interpreter's PySpark for the driver
    and its Python workers, its bin directory first on PATH, loopback only."""
    bin_dir = Path(sys.executable).parent
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


@dataclass(frozen=True)
class WorkerInfo:
    """One Worker as the Master's JSON page shows it."""

    worker_id: str
    state: str
    cores: int
    cores_used: int
    memory_mb: int


class LocalSparkCluster:
    """A Master and ``workers`` Workers on 127.0.0.1, with logs and work directories in
    ``work_dir``. The daemon logs' tails are part of every start-up error."""

    def __init__(self, work_dir: str | os.PathLike | None = None, *, workers: int = 2, cores: int = 2,
                 memory: str = "1g", start_timeout: float = 90.0, detached: bool = False) -> None:
        if workers < 1 or cores < 1:
            raise SparkClusterError(f"need at least one worker with one core, got workers={workers} cores={cores}")
        self._owns_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="spark-cluster-"))
        self.worker_count = workers
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        # A detached cluster outlives the Python process that started it (``start`` command).
        self.detached = detached
        self.master_port: int | None = None
        self.master_ui_port: int | None = None
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.start_seconds: float | None = None

    @property
    def master_url(self) -> str:
        if self.master_port is None:
            raise SparkClusterError("the cluster has not been started")
        return f"spark://127.0.0.1:{self.master_port}"

    def worker_dir(self, index: int) -> Path:
        return self.work_dir / f"worker-{index}"

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.work_dir / f"{name}.log"
        if not path.exists():
            return f"({path} was not written)"
        return f"--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _logs_tail(self) -> str:
        names = ["master", *(f"worker-{i}" for i in range(self.worker_count))]
        return "\n".join(self.log_tail(name) for name in names)

    # ---------------------------------------------------------------- start

    def start(self) -> LocalSparkCluster:
        if self.master is not None:
            raise SparkClusterError("this cluster is already started")
        began = time.monotonic()
        require_java()
        if self.work_dir.exists() and any(self.work_dir.iterdir()):
            shutil.rmtree(self.work_dir)  # never reuse another cluster's work directories
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.master_port, self.master_ui_port = free_loopback_port(), free_loopback_port()
        try:
            self.master = self._daemon("master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.master_port),
                                                  "--webui-port", str(self.master_ui_port)], {})
            self._wait(lambda state: state is not None, "the Master to answer")
            for index in range(self.worker_count):
                self.workers.append(self._start_worker(index))
            self._wait(lambda state: state is not None and
                       sum(w.state == "ALIVE" for w in state) >= self.worker_count,
                       f"{self.worker_count} Workers to register")
        except BaseException:
            self.stop()
            raise
        self._write_state()
        self.start_seconds = time.monotonic() - began
        return self

    def _start_worker(self, index: int) -> subprocess.Popen:
        root = self.worker_dir(index)
        (root / "local").mkdir(parents=True, exist_ok=True)
        return self._daemon(f"worker-{index}", [
            WORKER_CLASS, "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
            "--work-dir", str(root / "work"), "--webui-port", str(free_loopback_port()), self.master_url],
            # Executors put their block-manager (and so the instances' state) directories here.
            {"SPARK_LOCAL_DIRS": str(root / "local")})

    def _daemon(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        home = spark_home()
        environment = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
                       "SPARK_DAEMON_MEMORY": DAEMON_HEAP, "SPARK_NO_DAEMONIZE": "1",
                       "SPARK_LOG_DIR": str(self.work_dir), **env}
        with open(self.work_dir / f"{name}.log", "ab") as log:
            process = subprocess.Popen([str(home / "bin" / "spark-class"), *args], stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=environment, cwd=self.work_dir,
                                       preexec_fn=own_process_group if self.detached else die_with_parent)
        (self.work_dir / f"{name}.pid").write_text(f"{process.pid}\n")
        return process

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            for process in [self.master, *self.workers]:
                if process is not None and process.poll() is not None:
                    raise SparkClusterError(f"a Spark daemon exited with code {process.returncode} during start-up "
                                            f"(logs in {self.work_dir}):\n{self._logs_tail()}")
            if ready(self.worker_states()):
                return
            time.sleep(0.3)
        raise SparkClusterError(f"timed out after {self.start_timeout:.0f}s waiting for {what} "
                                f"(logs in {self.work_dir}):\n{self._logs_tail()}")

    def worker_states(self) -> list[WorkerInfo] | None:
        """The Workers the Master knows (None while the Master does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.master_ui_port}/json/", timeout=2) as response:
                page = json.load(response)
        except (urllib.error.URLError, OSError, ValueError):
            return None
        return [WorkerInfo(w["id"], w["state"], w["cores"], w["coresused"], w["memory"]) for w in page["workers"]]

    def _write_state(self) -> None:
        (self.work_dir / "master").write_text(self.master_url + "\n")
        (self.work_dir / "cluster.json").write_text(json.dumps({
            "master_url": self.master_url, "master_ui": f"http://127.0.0.1:{self.master_ui_port}",
            "workers": self.worker_count, "cores_per_worker": self.cores, "memory_per_worker": self.memory}))

    # ---------------------------------------------------------------- the processes, for failure tests

    def executor_of(self, pid: int) -> int:
        """The executor JVM whose Python worker (e.g. an instance, by its status ``pid``) is ``pid``."""
        return _ancestor(pid, "CoarseGrainedExecutorBackend")

    def worker_of(self, pid: int) -> int:
        """The Worker JVM that launched the executor running ``pid``."""
        return _ancestor(pid, WORKER_CLASS)

    def worker_index(self, worker_pid: int) -> int:
        for index, process in enumerate(self.workers):
            if process.pid == worker_pid:
                return index
        raise SparkClusterError(f"pid {worker_pid} is not a Worker of this cluster "
                                f"({[p.pid for p in self.workers]})")

    def executor_logs(self, lines: int = 40) -> str:
        """The tails of every executor's stderr (the instances log there)."""
        tails = []
        for path in sorted(self.work_dir.glob("worker-*/work/*/*/stderr")):
            text = path.read_text(errors="replace").splitlines()
            tails.append(f"--- {path}\n" + "\n".join(text[-lines:]))
        return "\n".join(tails) or "(no executor logs)"

    # ---------------------------------------------------------------- stop

    def stop(self) -> None:
        """Workers first (they kill their executors), then the Master."""
        processes = [*self.workers, self.master]
        self.workers, self.master = [], None
        for process in processes:
            if process is not None:
                terminate(process.pid, process.wait)
        for pid_file in self.work_dir.glob("*.pid"):
            pid_file.unlink(missing_ok=True)
        if self._owns_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> LocalSparkCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _ancestor(pid: int, marker: str) -> int:
    """The nearest ancestor of ``pid`` (or ``pid`` itself) whose command line contains ``marker``."""
    current = pid
    while current > 1:
        try:
            command = Path(f"/proc/{current}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{current}/stat").read_text()
        except OSError as exc:
            raise SparkClusterError(f"process {current} (an ancestor of {pid}) is gone: {exc}") from exc
        if marker in command:
            return current
        current = int(stat.rsplit(")", 1)[1].split()[1])  # the parent pid (field 4)
    raise SparkClusterError(f"process {pid} does not run under a {marker} process")


def _stop_detached(work_dir: Path) -> int:
    pid_files = sorted(work_dir.glob("worker-*.pid")) + sorted(work_dir.glob("master.pid"))
    if not pid_files:
        print(f"no Spark cluster is running from {work_dir}", file=sys.stderr)
        return 0
    for pid_file in pid_files:
        pid = int(pid_file.read_text())
        terminate(pid, wait_pid(pid))
        pid_file.unlink(missing_ok=True)
    return 0


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.spark_cluster",
                                     description="Local Spark standalone cluster (a Master and Workers) on loopback.")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a cluster in the background; prints the master URL")
    start.add_argument("--dir", required=True, help="work directory (wiped)")
    start.add_argument("--workers", type=int, default=2)
    start.add_argument("--cores", type=int, default=2, help="task slots per Worker")
    start.add_argument("--memory", default="1g", help="executor memory per Worker")
    stop = sub.add_parser("stop", help="stop the cluster started in --dir")
    stop.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            cluster = LocalSparkCluster(args.dir, workers=args.workers, cores=args.cores, memory=args.memory,
                                        detached=True).start()
            print(cluster.master_url)
            print(f"started in {cluster.start_seconds:.1f}s: {args.workers} workers x {args.cores} slots; "
                  f"UI http://127.0.0.1:{cluster.master_ui_port}, logs in {cluster.work_dir}", file=sys.stderr)
            return 0
        return _stop_detached(Path(args.dir))
    except SparkClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(_main())
