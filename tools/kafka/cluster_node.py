"""One node of the local cluster (tools/kafka/cluster.py): its ports, storage, log and
process, and the error every cluster operation raises."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

from tools.kafka.broker import BrokerError, log_tail


class ClusterError(BrokerError):
    """The local cluster could not be started, changed or stopped, or a wait on it timed out."""


@dataclasses.dataclass
class ClusterNode:
    """One node: broker and controller in one JVM, its storage and log in ``work_dir``."""

    node_id: int
    port: int
    controller_port: int
    work_dir: Path
    process: subprocess.Popen | None = None
    frozen: bool = False
    #: the java command line up to the main class
    jvm: list[str] = dataclasses.field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "broker.log"

    @property
    def properties(self) -> Path:
        return self.work_dir / "server.properties"

    @property
    def pid_file(self) -> Path:
        return self.work_dir / "broker.pid"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)
