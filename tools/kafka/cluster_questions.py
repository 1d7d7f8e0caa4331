"""Questions to the local cluster (tools/kafka/cluster.py) and the changes it makes through
Kafka's admin API: the group or transaction coordinator of a key, the leader and in-sync
replicas of every partition, the active controller, a partition's log as a node keeps it,
moving a partition's leader, waiting until the cluster is healthy. Each question is asked
again (bounded) while a node that just went away or came back makes Kafka answer with an
error or not at all, and fails with ClusterError naming what it waited for."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from tools.kafka.cluster_node import ClusterError, ClusterNode

T = TypeVar("T")

#: Internal topics that must stay replicated for groups and transactions to work.
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
#: FindCoordinator key types.
GROUP, TRANSACTION = 0, 1
#: Partitions of __consumer_offsets and __transaction_state (few: a coordinator is on each node).
COORDINATOR_PARTITIONS = 6


@dataclasses.dataclass(frozen=True)
class PartitionState:
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def fully_replicated(self) -> bool:
        return self.leader >= 0 and set(self.isr) == set(self.replicas)


class ClusterQuestions:
    """What LocalKafkaCluster asks its nodes through Kafka; it keeps the nodes."""

    nodes: dict[int, ClusterNode]

    def answering_nodes(self) -> list[int]:
        raise NotImplementedError

    def logs(self, lines: int = 15) -> str:
        raise NotImplementedError

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

        def left() -> float:  # of the whole move's timeout
            return timeout - (time.monotonic() - began)

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

        self._retry(reassigned, left(), f"the reassignment of {topic}-{partition} to replicas {order}")

        def reordered() -> bool | None:
            with self.admin() as admin:
                pending = admin.list_partition_reassignments([tp])
            current = self.partitions([topic]).get((topic, partition))
            return (not pending and current is not None and list(current.replicas) == order) or None

        self._retry(reordered, left(), f"replicas of {topic}-{partition} to be {order}")

        def elected() -> bool | None:
            with self.admin() as admin:
                admin.elect_leaders(0, {topic: [partition]})
            return self.leader(topic, partition) == to_node or None

        self._retry(elected, left(), f"node {to_node} to lead {topic}-{partition}")
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
