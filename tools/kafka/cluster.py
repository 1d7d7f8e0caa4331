"""A real N-node Apache Kafka cluster (KRaft) on loopback, for the replicated-cluster tests.

Each node is its own JVM (``kafka.Kafka``) in combined broker+controller mode, with its own
data directory and ports; the nodes form one quorum of N controller voters. Topics default to
replication factor 3 (at most N) and min.insync.replicas 2, the group offsets and transaction
state topics alike, as a production cluster would run them.

Operations on a node, for tests that take brokers away under a running application: a clean
stop (SIGTERM: controlled shutdown), a hard one (SIGKILL), freeze (SIGSTOP) and thaw
(SIGCONT), and a start again on the same data directory and ports. Questions to the cluster
(tools/kafka/cluster_questions.py): the group coordinator of a group id, the transaction
coordinator of a transactional id, the leader and in-sync replicas of every partition; moving
a partition's leader (reordered replicas, then a preferred leader election); waiting until
given topics are fully replicated again. Every wait is bounded and fails with ClusterError
naming what it waited for and the tails of the nodes' logs.

From Python::

    with LocalKafkaCluster(work_dir, nodes=3) as cluster:
        print(cluster.bootstrap_servers)
        cluster.stop_node(cluster.group_coordinator("my-app"))

From a shell::

    python -m tools.kafka.cluster start --dir .local/cluster --nodes 3   # prints the bootstrap servers
    python -m tools.kafka.cluster stop --dir .local/cluster
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tools.kafka.broker import (
    LOCAL_BROKER_SETTINGS,
    BrokerError,
    _random_cluster_id,
    format_storage,
    kafka_jvm,
    require_java,
    resolve_jars,
    spawn_kafka,
    wait_answers_metadata,
)
from tools.kafka.cluster_node import ClusterError, ClusterNode
from tools.kafka.cluster_questions import COORDINATOR_PARTITIONS, ClusterQuestions
from tools.local_processes import another_free_port, port_in_use, process_state, terminate, wait_pid

__all__ = ["ClusterError", "LocalKafkaCluster"]

#: How long the nodes of a cluster being stopped get after SIGTERM.
CLUSTER_STOP_GRACE_SECONDS = 8.0
#: A node's registration with the controllers lives until its session expires, even after a
#: clean stop: a node started again sooner is refused (DUPLICATE_BROKER_REGISTRATION) until
#: then, and a killed node's partitions wait that long for new leaders. Kafka's 9 s session
#: cost every restart of a test 6-9 s of the whole cluster and its clients waiting; 4 s with
#: a heartbeat a second still tolerates three missed heartbeats on a loaded machine.
NODE_SESSION_SETTINGS = {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "1000"}


class LocalKafkaCluster(ClusterQuestions):
    """``nodes`` KRaft nodes on 127.0.0.1 with their storage under ``work_dir/node-<id>``.

    ``heap`` is each JVM's maximum heap: small, as tests run several brokers on a small machine.
    """

    def __init__(self, work_dir: str | os.PathLike | None = None, nodes: int = 3, heap: str = "384m",
                 start_timeout: float = 120.0, detached: bool = False, min_insync_replicas: int = 2) -> None:
        if nodes < 1:
            raise ClusterError("a cluster needs at least one node")
        self._owns_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="kafka-cluster-"))
        self.size = nodes
        self.heap = heap
        self.start_timeout = start_timeout
        self.detached = detached
        self.replication_factor = min(3, nodes)
        self.min_insync_replicas = min(min_insync_replicas, self.replication_factor)
        self.nodes: dict[int, ClusterNode] = {}
        self.start_seconds: float | None = None

    # ---------------------------------------------------------------- addresses and logs

    @property
    def bootstrap_servers(self) -> str:
        """Every node's address: clients find the cluster through any node that is up."""
        if not self.nodes:
            raise ClusterError("the cluster has not been started")
        return ",".join(node.address for node in self.nodes.values())

    def node(self, node_id: int) -> ClusterNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise ClusterError(f"no node {node_id} in the cluster (nodes: {sorted(self.nodes)})") from None

    def answering_nodes(self) -> list[int]:
        """Nodes whose process runs and is not frozen."""
        return [n.node_id for n in self.nodes.values() if n.running and not n.frozen]

    def logs(self, lines: int = 15) -> str:
        return "\n".join(f"----- node {n.node_id} ({self._describe(n)}), {n.log_path}\n{n.log_tail(lines)}"
                         for n in self.nodes.values())

    @staticmethod
    def _describe(node: ClusterNode) -> str:
        if not node.running:
            return "stopped"
        assert node.process is not None
        return f"pid {node.process.pid}" + (", frozen" if node.frozen else "")

    # ---------------------------------------------------------------- start and stop

    def start(self) -> LocalKafkaCluster:
        if self.nodes:
            raise ClusterError("this cluster is already started")
        began = time.monotonic()
        java = require_java()
        lib = resolve_jars()
        if self.work_dir.exists() and any(self.work_dir.iterdir()):
            shutil.rmtree(self.work_dir)  # fresh storage for every cluster start
        self.work_dir.mkdir(parents=True, exist_ok=True)
        taken: set[int | None] = set()
        for node_id in range(1, self.size + 1):
            self.nodes[node_id] = ClusterNode(node_id, another_free_port(taken), another_free_port(taken),
                                              self.work_dir / f"node-{node_id}")
        cluster_id = _random_cluster_id()
        for node in self.nodes.values():
            node.work_dir.mkdir()
            node.properties.write_text(self._server_properties(node))
            node.jvm = kafka_jvm(java, lib, node.work_dir, self.heap)
        self._write_layout()
        try:
            # The nodes format and start side by side: a cluster of three starts about as fast as one node.
            self._in_parallel(lambda node: format_storage(node.jvm, node.properties, cluster_id, node.log_path))
            for node in self.nodes.values():
                self._spawn(node)
            deadline = time.monotonic() + self.start_timeout
            for node in self.nodes.values():
                self._wait_answers(node, deadline)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _in_parallel(self, action: Callable[[ClusterNode], None]) -> None:
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(max_workers=self.size) as pool:
            for future in [pool.submit(action, node) for node in self.nodes.values()]:
                future.result()

    def _spawn(self, node: ClusterNode) -> None:
        node.process = spawn_kafka(node.jvm, node.properties, node.log_path, self.detached)
        node.frozen = False
        node.pid_file.write_text(f"{node.process.pid}\n")

    def _wait_answers(self, node: ClusterNode, deadline: float) -> None:
        assert node.process is not None
        try:
            wait_answers_metadata(node.process, node.port, max(1.0, deadline - time.monotonic()), node.log_path,
                                  f"Kafka node {node.node_id}", brokers=len(self.answering_nodes()))
        except BrokerError as exc:
            raise ClusterError(f"{exc}\nthe other nodes:\n{self.logs()}") from None

    def _write_layout(self) -> None:
        """Node ids and ports in ``work_dir/cluster.json``, for the CLI's ``stop``."""
        layout = {"nodes": {str(n.node_id): {"port": n.port, "controller_port": n.controller_port}
                            for n in self.nodes.values()}}
        (self.work_dir / "cluster.json").write_text(json.dumps(layout, indent=1) + "\n")
        (self.work_dir / "bootstrap").write_text(self.bootstrap_servers + "\n")

    def _server_properties(self, node: ClusterNode) -> str:
        rf, min_isr = str(self.replication_factor), str(self.min_insync_replicas)
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}"
                                                 for n in self.nodes.values()),
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.work_dir / "data"),
            "num.partitions": "1",
            "default.replication.factor": rf,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": str(COORDINATOR_PARTITIONS),
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": str(COORDINATOR_PARTITIONS),
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "unclean.leader.election.enable": "false",
            **NODE_SESSION_SETTINGS,
            **LOCAL_BROKER_SETTINGS,
            # Fewer threads than the defaults: several nodes share two cores with other brokers.
            "num.io.threads": "4",
            "num.network.threads": "2",
            "num.replica.fetchers": "1",
            "background.threads": "4",
        }
        return "".join(f"{k}={v}\n" for k, v in settings.items())

    def stop(self, grace: float = CLUSTER_STOP_GRACE_SECONDS) -> None:
        """Stop every node (thawed first): SIGTERM to all at once, SIGKILL to any still running
        ``grace`` seconds later (nodes that lose their quorum while stopping wait for it; the
        storage is not reused, as every start formats it afresh)."""
        from tools.kafka.topics import close_kept_admins  # kafka-python only where clients are made

        if self.nodes:
            close_kept_admins(self.bootstrap_servers)
        nodes = [n for n in self.nodes.values() if n.process is not None]
        for node in nodes:
            self._signal(node, signal.SIGCONT)
            node.frozen = False
            self._signal(node, signal.SIGTERM)

        deadline = time.monotonic() + grace
        for node in nodes:  # they stop side by side; SIGKILL for one still running after the grace period
            assert node.process is not None
            terminate(node.process.pid, node.process.wait, grace=max(0.1, deadline - time.monotonic()))
            node.process = None
            node.pid_file.unlink(missing_ok=True)
        self.nodes.clear()
        if self._owns_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> LocalKafkaCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- one node

    @staticmethod
    def _signal(node: ClusterNode, sig: signal.Signals) -> None:
        if node.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.process.pid, sig)

    def stop_node(self, node_id: int, timeout: float = 60.0) -> float:
        """Clean stop (SIGTERM: the node hands its leaderships over first); returns the seconds
        it took. A node still running after ``timeout`` is killed and ClusterError raised."""
        node = self._running(node_id)
        assert node.process is not None
        began = time.monotonic()
        self._signal(node, signal.SIGCONT)
        node.frozen = False
        self._signal(node, signal.SIGTERM)
        try:
            node.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            tail = node.log_tail()
            self._signal(node, signal.SIGKILL)
            node.process.wait(timeout=30)
            node.process = None
            raise ClusterError(f"node {node_id} did not stop within {timeout:.0f}s of SIGTERM (killed); "
                               f"log tail:\n{tail}") from None
        node.process = None
        node.pid_file.unlink(missing_ok=True)
        return time.monotonic() - began

    def kill_node(self, node_id: int) -> None:
        """Hard stop (SIGKILL): no controlled shutdown, the controller notices when its session expires."""
        node = self._running(node_id)
        assert node.process is not None
        self._signal(node, signal.SIGKILL)
        try:
            node.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"node {node_id} (pid {node.process.pid}) still runs 30s after SIGKILL") from None
        node.process = None
        node.frozen = False
        node.pid_file.unlink(missing_ok=True)

    def freeze_node(self, node_id: int) -> None:
        """SIGSTOP: the node holds its connections open and answers nothing until thawed."""
        node = self._running(node_id)
        if node.frozen:
            raise ClusterError(f"node {node_id} is already frozen")
        self._signal(node, signal.SIGSTOP)
        node.frozen = True
        self._wait_state(node, lambda state: state == "T", "stopped (SIGSTOP)")

    def thaw_node(self, node_id: int) -> None:
        node = self._running(node_id)
        if not node.frozen:
            raise ClusterError(f"node {node_id} is not frozen")
        self._signal(node, signal.SIGCONT)
        node.frozen = False
        self._wait_state(node, lambda state: state != "T", "running again (SIGCONT)")

    @staticmethod
    def _wait_state(node: ClusterNode, reached: Callable[[str], bool], what: str, timeout: float = 10.0) -> None:
        """The signal is delivered asynchronously: wait until the kernel shows the process ``what``."""
        assert node.process is not None
        deadline = time.monotonic() + timeout
        while not reached(state := process_state(node.process.pid)):
            if time.monotonic() > deadline:
                raise ClusterError(f"node {node.node_id} (pid {node.process.pid}) was not {what} within "
                                   f"{timeout:.0f}s: its state is {state!r}")
            time.sleep(0.02)

    def start_node(self, node_id: int, timeout: float | None = None) -> float:
        """Start a stopped node again on its data directory and ports; returns when it answers
        metadata requests as a member of the cluster (the seconds that took). Call it from a
        thread that outlives the node: a node gets SIGTERM when the thread that started it
        ends (PR_SET_PDEATHSIG, so that nodes never outlive the tests)."""
        return self.start_nodes([node_id], timeout)

    def start_nodes(self, node_ids: Iterable[int] | None = None, timeout: float | None = None) -> float:
        """Start stopped nodes (every stopped one by default) at once and wait until each
        answers: after the whole cluster went down, one node alone has no controller quorum to
        join. Returns the seconds that took; see start_node for the calling thread."""
        nodes = [self.node(n) for n in node_ids] if node_ids is not None else \
            [n for n in self.nodes.values() if not n.running]
        for node in nodes:
            if node.running:
                raise ClusterError(f"node {node.node_id} is already running (pid {node.process.pid})")  # type: ignore[union-attr]
            busy = [port for port in (node.port, node.controller_port) if port_in_use(port)]
            if busy:
                raise ClusterError(f"node {node.node_id} cannot start again: its port(s) {busy} on 127.0.0.1 are "
                                   f"in use")
        began = time.monotonic()
        for node in nodes:
            self._spawn(node)
        deadline = began + (timeout or self.start_timeout)
        for node in nodes:
            self._wait_answers(node, deadline)
        return time.monotonic() - began

    def _running(self, node_id: int) -> ClusterNode:
        node = self.node(node_id)
        if not node.running:
            raise ClusterError(f"node {node_id} is not running")
        return node


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.kafka.cluster",
                                     description="Local N-node Kafka cluster (KRaft) on loopback.")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a cluster in the background; prints its bootstrap servers")
    start.add_argument("--dir", required=True, help="work directory (wiped and formatted)")
    start.add_argument("--nodes", type=int, default=3)
    stop = sub.add_parser("stop", help="stop every node of the cluster started in --dir")
    stop.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            cluster = LocalKafkaCluster(args.dir, nodes=args.nodes, detached=True)
            cluster.start()
            print(cluster.bootstrap_servers)
            print(f"{args.nodes} nodes started in {cluster.start_seconds:.1f}s, logs {cluster.work_dir}/node-*/",
                  file=sys.stderr)
        elif args.command == "stop":
            pid_files = sorted(Path(args.dir).glob("node-*/broker.pid"))
            if not pid_files:
                print(f"no cluster node is running from {args.dir}", file=sys.stderr)
            pids = [int(pid_file.read_text()) for pid_file in pid_files]
            for sig in (signal.SIGCONT, signal.SIGTERM):  # thawed, then all at once: they stop side by side
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
            deadline = time.monotonic() + CLUSTER_STOP_GRACE_SECONDS
            for pid, pid_file in zip(pids, pid_files, strict=True):
                terminate(pid, wait_pid(pid), grace=max(0.1, deadline - time.monotonic()))
                pid_file.unlink(missing_ok=True)
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
