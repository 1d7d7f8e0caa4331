"""A real N-node Apache Kafka cluster (KRaft) on loopback, for the replicated-cluster tests.

Each node is its own JVM (``kafka.Kafka``) in combined broker+controller mode, with its own
data directory and ports; the nodes form one quorum of N controller voters. Topics default to
replication factor 3 (at most N) and min.insync.replicas 2, the group offsets and transaction
state topics alike, as a production cluster would run them.

Operations on a node, for tests that take brokers away under a running application: a clean
stop (SIGTERM: controlled shutdown), a hard one (SIGKILL), freeze (SIGSTOP) and thaw
(SIGCONT), and a start again on the same data directory and ports. Questions to the cluster:
the group coordinator of a group id, the transaction coordinator of a transactional id, the
leader and in-sync replicas of every partition; moving a partition's leader (reordered
replicas, then a preferred leader election); waiting until given topics are fully replicated
again. Every wait is bounded and fails with ClusterError naming what it waited for and the
tails of the nodes' logs.

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
import dataclasses
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from tools.kafka.broker import (
    BrokerError,
    _random_cluster_id,
    format_storage,
    kafka_jvm,
    log_tail,
    require_java,
    resolve_jars,
    spawn_kafka,
    wait_answers_metadata,
)
from tools.local_processes import another_free_port, port_in_use, process_state, terminate, wait_pid

T = TypeVar("T")

#: Internal topics that must stay replicated for groups and transactions to work.
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
#: How long the nodes of a cluster being stopped get after SIGTERM.
CLUSTER_STOP_GRACE_SECONDS = 8.0
#: FindCoordinator key types.
GROUP, TRANSACTION = 0, 1
#: Partitions of __consumer_offsets and __transaction_state (few: a coordinator is on each node).
COORDINATOR_PARTITIONS = 6


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


@dataclasses.dataclass(frozen=True)
class PartitionState:
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def fully_replicated(self) -> bool:
        return self.leader >= 0 and set(self.isr) == set(self.replicas)


class LocalKafkaCluster:
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
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            "unclean.leader.election.enable": "false",
            "log.segment.bytes": str(64 * 1024 * 1024),
            "log.cleaner.backoff.ms": "1000",
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

    # ---------------------------------------------------------------- questions to the cluster

    @contextlib.contextmanager
    def admin(self, request_timeout_ms: int = 5_000) -> Iterator[Any]:
        """A KafkaAdminClient bootstrapped from the nodes that answer (not stopped, not frozen)."""
        from kafka import KafkaAdminClient

        answering = self.answering_nodes()
        if not answering:
            raise ClusterError("no node of the cluster is running and thawed")
        client = KafkaAdminClient(bootstrap_servers=",".join(self.nodes[n].address for n in answering),
                                  request_timeout_ms=request_timeout_ms, bootstrap_timeout_ms=request_timeout_ms,
                                  client_id="local-cluster-tools")
        try:
            yield client
        finally:
            client.close()

    def _retry(self, ask: Callable[[], T | None], timeout: float, what: str) -> T:
        """``ask()`` until it returns a value (None or a Kafka error: not yet), within ``timeout``."""
        from kafka.errors import KafkaError

        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                answer = ask()
                if answer is not None:
                    return answer
            except (KafkaError, OSError) as exc:
                last = exc
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last!r}); "
                                   f"nodes:\n{self.logs()}")
            time.sleep(0.5)

    def _coordinator(self, key: str, key_type: int, timeout: float) -> int:
        from kafka.errors import for_code
        from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest

        kind = "group" if key_type == GROUP else "transaction"

        def ask() -> int | None:
            with self.admin() as admin:
                manager = admin._manager  # a fresh FindCoordinator: the admin client caches coordinators

                async def find() -> Any:
                    return await manager.send(FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key],
                                                                     min_version=4))
                (found,) = manager.run(find).coordinators
            if found.error_code:
                raise for_code(found.error_code)(f"{kind} coordinator of {key!r}")
            return found.node_id

        return self._retry(ask, timeout, f"the {kind} coordinator of {key!r}")

    def group_coordinator(self, group_id: str, timeout: float = 60.0) -> int:
        """The node id of ``group_id``'s group coordinator (the leader of its offsets partition)."""
        return self._coordinator(group_id, GROUP, timeout)

    @staticmethod
    def offsets_partition(group_id: str) -> int:
        """The __consumer_offsets partition holding ``group_id`` (as the brokers place it: the
        absolute Java String.hashCode modulo the partitions): groups on one partition always
        share their coordinator."""
        code = 0
        for unit in group_id.encode("utf-16-be").hex(" ", 2).split():
            code = (31 * code + int(unit, 16)) & 0xFFFFFFFF
        signed = code - (1 << 32) if code >= 1 << 31 else code
        return (0 if signed == -(1 << 31) else abs(signed)) % COORDINATOR_PARTITIONS

    def transaction_coordinator(self, transactional_id: str, timeout: float = 60.0) -> int:
        """The node id of ``transactional_id``'s transaction coordinator."""
        return self._coordinator(transactional_id, TRANSACTION, timeout)

    def partitions(self, topics: Iterable[str] | None, timeout: float = 30.0,
                   ) -> dict[tuple[str, int], PartitionState]:
        """Leader, replicas and in-sync replicas of every partition of ``topics`` (that exist;
        None: every topic), asked again within ``timeout`` while a node just stopped is still in
        the metadata."""
        names = None if topics is None else list(topics)

        def ask() -> list[dict[str, Any]]:
            with self.admin() as admin:
                return admin.describe_topics(names)

        described = self._retry(ask, timeout, f"the partitions of {names}")
        states = {}
        for topic in described:
            if topic["error_code"]:
                continue
            for p in topic["partitions"]:
                states[(topic["name"], p["partition_index"])] = PartitionState(
                    p["leader_id"], tuple(p["replica_nodes"]), tuple(p["isr_nodes"]))
        return states

    def active_controller(self, timeout: float = 30.0) -> int:
        """The node id of the KRaft quorum's leader (the active controller)."""
        def ask() -> int | None:
            with self.admin() as admin:
                quorum = admin.describe_metadata_quorum()
            leader = quorum["topics"][0]["partitions"][0]["leader_id"]
            return leader if leader >= 0 else None

        return self._retry(ask, timeout, "the active controller")

    def leader(self, topic: str, partition: int) -> int:
        state = self.partitions([topic]).get((topic, partition))
        if state is None:
            raise ClusterError(f"no partition {topic}-{partition} in the cluster")
        return state.leader

    def dump_log(self, topic: str, partition: int, low: int, high: int, timeout: float = 120.0) -> list[str]:
        """The batches of ``topic``-``partition`` holding offsets ``low``..``high``, as one node's
        log keeps them (Kafka's DumpLogSegments): producer id and epoch, sequences, transactional
        or a transaction marker (COMMIT/ABORT). What a failed exactly-once oracle needs to tell
        a batch written twice from a transaction committed twice."""
        node = next((n for n in self.nodes.values() if (n.work_dir / "data" / f"{topic}-{partition}").is_dir()), None)
        if node is None:
            return [f"(no node holds {topic}-{partition})"]
        segments = sorted(str(p) for p in (node.work_dir / "data" / f"{topic}-{partition}").glob("*.log"))
        dump = subprocess.run([*node.jvm, "kafka.tools.DumpLogSegments", "--deep-iteration", "--files",
                               ",".join(segments)], capture_output=True, text=True, timeout=timeout)
        lines, keep = [f"node {node.node_id}'s log of {topic}-{partition}, offsets {low}-{high}:"], False
        for line in dump.stdout.splitlines():
            if line.startswith("baseOffset:"):
                fields = line.split()
                keep = int(fields[3]) >= low and int(fields[1]) <= high  # lastOffset, baseOffset
                if keep:
                    created = int(fields[fields.index("CreateTime:") + 1]) / 1000
                    lines.append(" ".join(fields[:20]) + " created "
                                 + datetime.datetime.fromtimestamp(created).strftime("%H:%M:%S.%f")[:-3])
            elif keep and "endTxnMarker" in line:
                lines.append("  marker " + line.split("endTxnMarker:")[1].strip())
        return lines

    def move_leader(self, topic: str, partition: int, to_node: int, timeout: float = 60.0) -> float:
        """Make ``to_node`` (a replica in sync) the leader of ``topic``-``partition``: it goes
        first in the replica list (a reassignment that moves no data), then a preferred leader
        election. Returns when the metadata names it leader (the seconds that took)."""
        from kafka import TopicPartition

        began = time.monotonic()
        state = self.partitions([topic]).get((topic, partition))
        if state is None:
            raise ClusterError(f"no partition {topic}-{partition} in the cluster")
        if to_node not in state.isr:
            raise ClusterError(f"node {to_node} is not an in-sync replica of {topic}-{partition} ({state})")
        if state.leader == to_node:
            return 0.0
        tp = TopicPartition(topic, partition)
        order = [to_node, *(r for r in state.replicas if r != to_node)]

        def reassigned() -> bool:
            # asked again on a Kafka error: a request queued behind a slow connection set-up on a
            # loaded machine times out (KafkaTimeoutError), and the same reassignment again is harmless
            with self.admin() as admin:
                refused = admin.alter_partition_reassignments({tp: order}).get(tp)
            if refused is not None:
                raise ClusterError(f"reassigning {topic}-{partition} to replicas {order} was refused: {refused}")
            return True

        self._retry(reassigned, timeout, f"the reassignment of {topic}-{partition} to replicas {order}")

        def reordered() -> bool | None:
            with self.admin() as admin:
                pending = admin.list_partition_reassignments([tp])
            current = self.partitions([topic]).get((topic, partition))
            return (not pending and current is not None and list(current.replicas) == order) or None

        self._retry(reordered, timeout - (time.monotonic() - began), f"replicas of {topic}-{partition} to be {order}")

        def elected() -> bool | None:
            with self.admin() as admin:
                admin.elect_leaders(0, {topic: [partition]})
            return self.leader(topic, partition) == to_node or None

        self._retry(elected, timeout - (time.monotonic() - began), f"node {to_node} to lead {topic}-{partition}")
        return time.monotonic() - began

    def wait_healthy(self, topics: Iterable[str] | None = (), timeout: float = 120.0) -> float:
        """Until every node is registered and every partition of ``topics`` (None: of every
        topic) and of the internal topics (those that exist) has a leader and all its replicas
        in sync; returns the seconds waited. Only meaningful with every node running and thawed."""
        stopped = [n.node_id for n in self.nodes.values() if not n.running or n.frozen]
        if stopped:
            raise ClusterError(f"nodes {stopped} are stopped or frozen: the cluster cannot become healthy")
        wanted = None if topics is None else list(topics)
        names = None if wanted is None else [*INTERNAL_TOPICS, *wanted]
        began = time.monotonic()
        unhealthy: dict[str, Any] = {}

        def healthy() -> bool | None:
            unhealthy.clear()
            with self.admin() as admin:
                brokers = {b["broker_id"] for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")}
            if brokers != set(self.nodes):
                unhealthy["registered brokers"] = sorted(brokers)
            states = self.partitions(names)
            for topic in wanted or ():
                if not any(t == topic for t, _ in states):
                    unhealthy[topic] = "missing"
            unhealthy.update({f"{t}-{p}": s for (t, p), s in states.items() if not s.fully_replicated})
            return not unhealthy or None

        try:
            self._retry(healthy, timeout, "a healthy cluster")
        except ClusterError as exc:
            raise ClusterError(f"{exc}\nnot healthy: {unhealthy}") from None
        return time.monotonic() - began


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
