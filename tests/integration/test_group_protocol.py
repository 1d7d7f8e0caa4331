"""The ``"stream"`` assignor on a real broker, with plain kafka-python consumers as stream threads.

Each member is a KafkaConsumer whose only assignor is a StreamsPartitionAssignor with a
trivial context (previous tasks = its last AssignmentInfo, running actives report -2,
owned partitions = ``consumer.assignment()``); a Python thread polls it and triggers the
rebalances the AssignmentInfo asks for (``request_rebalance``). Shows: the group forms
with the assignor, standbys are handed out with ``num_standby_replicas=1``, a member
joining under the cooperative protocol revokes only the partitions that move, a
follower's requested rebalance really runs (and revokes nothing), and a static member
restarting within the session timeout gets its tasks back without a rebalance.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.structs import TopicPartition as TP

from airflow_stateful_provider.streams.assignment.assignment_configs import AssignmentConfigs
from airflow_stateful_provider.streams.assignment.assignment_info import AssignmentInfo
from airflow_stateful_provider.streams.assignment.lag import LATEST_OFFSET
from airflow_stateful_provider.streams.assignment.streams_partition_assignor import (
    REBALANCE_POLL_MS,
    AssignorContext,
    StreamsPartitionAssignor,
)
from airflow_stateful_provider.streams.kafka.group_join import (
    group_rejoining,
    keep_completed_join_results,
    request_rebalance,
)
from airflow_stateful_provider.streams.processor import Processor
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topology.topology import Topology
from tools.kafka.topics import create_topics
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

PARTITIONS = 4


@dataclasses.dataclass
class StoreSpec:
    name: str
    logging_enabled: bool = True


class Noop(Processor):
    def process(self, record):
        pass


def make_topology(counts_topic: str, events_topic: str) -> Topology:
    """Subtopology 0 (stateful, logged store ``counts``) and subtopology 1 (stateless)."""
    top = Topology()
    top.add_source("src-counts", counts_topic)
    top.add_processor("count", Noop, "src-counts")
    top.add_state_store(StoreSpec("counts"), "count")
    top.add_source("src-events", events_topic)
    top.add_processor("pass", Noop, "src-events")
    return top


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.revoked: list[set[TP]] = []

    def on_partitions_revoked(self, revoked):
        self.revoked.append(set(revoked))

    def on_partitions_assigned(self, assigned):
        pass


class StreamThreadStandIn:
    """One group member driven by its own polling thread."""

    def __init__(self, env: dict, name: str, process_id: uuid.UUID, *, group_instance_id: str | None = None) -> None:
        self.name = name
        self.info: AssignmentInfo | None = None
        self.assignments = 0
        self.listener = Recorder()
        self._handled_rebalance_time: tuple[int, int] | None = None
        self.assignor = StreamsPartitionAssignor(AssignorContext(
            process_id=process_id, application_id=env["app"], topology=env["topology"],
            fetch_end_offsets=env["fetch_end_offsets"], on_assignment=self._on_assignment,
            configs=AssignmentConfigs(num_standby_replicas=1),
            previous_active_tasks=lambda: set(self.info.active_tasks) if self.info else set(),
            previous_standby_tasks=lambda: set(self.info.standby_tasks) if self.info else set(),
            task_offset_sums=lambda: {t: LATEST_OFFSET for t in self.info.active_tasks} if self.info else {},
            owned_partitions=lambda: self.consumer.assignment(),
        ))
        self.env = env
        self.assignor.assign = self._assign_as_leader  # type: ignore[method-assign]
        self.consumer = KafkaConsumer(
            bootstrap_servers=env["bootstrap"], group_id=env["app"], client_id=f"{env['app']}-{name}",
            group_instance_id=group_instance_id, partition_assignment_strategy=[self.assignor],
            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300,
        )
        # As StreamThread: kafka-python 3.0.12 can leave a member REBALANCING with heartbeats
        # off after a join its poll returned before (kafka/group_join.py); the group then
        # evicts it and settles without it.
        assert keep_completed_join_results(self.consumer)
        for topic in env["topics"]:  # as StreamThread: join with metadata, saving a rebalance
            self.consumer.partitions_for_topic(topic)
        self.consumer.subscribe(env["topics"], listener=self.listener)
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _assign_as_leader(self, cluster, members):
        self.env["leaders"].append(self.name)
        return StreamsPartitionAssignor.assign(self.assignor, cluster, members)

    def _on_assignment(self, info: AssignmentInfo, partitions) -> None:
        self.info = info
        self.assignments += 1

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.consumer.poll(timeout_ms=REBALANCE_POLL_MS if group_rejoining(self.consumer) else 100)
                info = self.info
                if info is not None and info.next_rebalance_ms >= 0:
                    key = (self.assignments, info.next_rebalance_ms)
                    if key != self._handled_rebalance_time and info.next_rebalance_ms <= time.time() * 1000:
                        self._handled_rebalance_time = key
                        request_rebalance(self.consumer)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    @property
    def owned(self) -> set[TP]:
        return set(self.info.active_partitions) if self.info else set()

    def close(self, *, leave: bool = True) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close(autocommit=False)


@pytest.fixture
def env(bootstrap_servers):
    suffix = uuid.uuid4().hex[:8]
    app, counts, events = f"gp-{suffix}", f"gp-counts-{suffix}", f"gp-events-{suffix}"
    changelog = f"{app}-counts-changelog"
    create_topics(bootstrap_servers, {counts: PARTITIONS, events: PARTITIONS, changelog: PARTITIONS})
    end_offsets_client = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=None)
    fetches = []

    def fetch_end_offsets(partitions):
        fetches.append(len(partitions))
        return end_offsets_client.end_offsets(list(partitions), timeout_ms=3000)

    members: list[StreamThreadStandIn] = []
    yield {
        "bootstrap": bootstrap_servers, "app": app, "topics": [counts, events], "changelog": changelog,
        "topology": make_topology(counts, events), "fetch_end_offsets": fetch_end_offsets, "fetches": fetches,
        "members": members, "leaders": [],
        "all_partitions": {TP(topic, p) for topic in (counts, events) for p in range(PARTITIONS)},
    }
    for m in members:
        try:
            m.close()
        except Exception:  # noqa: BLE001 - best effort cleanup
            pass
    end_offsets_client.close()


def start(env, name, process_id, **kwargs) -> StreamThreadStandIn:
    member = StreamThreadStandIn(env, name, process_id, **kwargs)
    env["members"].append(member)
    return member


def wait_stable(env, members, timeout=30.0) -> None:
    """Every member has an assignment of the same generation with no pending follow-up, the
    actives cover every partition exactly once, and the consumers own exactly what they were
    assigned."""

    def stable() -> bool:
        for m in members:
            assert m.error is None, f"{m.name} failed: {m.error!r}"
        if any(m.info is None or m.info.next_rebalance_ms == 0 for m in members):
            return False
        if len({m.assignor.generation for m in members}) != 1:
            return False
        owned = [m.owned for m in members]
        if sum(len(o) for o in owned) != len(env["all_partitions"]) or set().union(*owned) != env["all_partitions"]:
            return False
        return all(m.consumer.assignment() == m.owned for m in members)

    def describe() -> str:
        lines = []
        for m in members:
            coordinator = m.consumer._coordinator
            join_task = coordinator._join_task
            lines.append(f"{m.name}: generation {m.assignor.generation}, active "
                         f"{sorted(map(str, m.info.active_tasks)) if m.info else None}, coordinator "
                         f"{coordinator.state} {coordinator._generation}, join pending "
                         f"{join_task is not None and not join_task.is_done}")
            if join_task is not None and not join_task.is_done and "rebalancing" in str(coordinator.state):
                lines.append(f"  {m.name} looks stuck in kafka-python's join (see docs/group-protocol.md, "
                             "'Known kafka-python 3.0.12 issue')")
        return "\n".join(lines)

    wait_until(stable, timeout, "the group to settle", describe)
    settled = [(m.assignments, frozenset(m.owned)) for m in members]
    assert all(m.info.error_code == 0 for m in members), describe()
    time.sleep(1.0)  # no rebalance still under way
    if [(m.assignments, frozenset(m.owned)) for m in members] != settled:
        wait_stable(env, members, timeout)


def test_group_forms_with_standbys_a_joining_member_revokes_only_what_moves_and_a_follower_can_rebalance(env):
    p1 = start(env, "p1", uuid.UUID(int=1))
    p2 = start(env, "p2", uuid.UUID(int=2))
    wait_stable(env, [p1, p2])

    admin = KafkaAdminClient(bootstrap_servers=env["bootstrap"])
    try:
        described = admin.describe_groups([env["app"]])[env["app"]]
    finally:
        admin.close()
    assert described["protocol_type"] == "consumer", described
    assert described.get("protocol_data", described.get("protocol")) == "stream", described
    assert env["fetches"], "the leader fetched changelog end offsets"

    stateful = {TaskId(0, p) for p in range(PARTITIONS)}
    for m, other in ((p1, p2), (p2, p1)):
        assert set(m.info.standby_tasks) == stateful - set(m.info.active_tasks)  # standby of every other one
        for task, parts in m.info.standby_tasks.items():
            assert parts == {TP(env["changelog"], task.partition)}
        assert not set(m.info.standby_tasks) & set(other.info.standby_tasks)
    assert {len(p1.info.active_tasks), len(p2.info.active_tasks)} == {4}
    owned_before = {m.name: set(m.owned) for m in (p1, p2)}
    revocations_before = {m.name: len(m.listener.revoked) for m in (p1, p2)}

    p3 = start(env, "p3", uuid.UUID(int=3))
    wait_stable(env, [p1, p2, p3])
    assert p3.owned, "the new member received tasks"
    for m in (p1, p2):
        revoked = set().union(*m.listener.revoked[revocations_before[m.name]:])
        assert revoked == owned_before[m.name] - m.owned, f"{m.name} revoked {sorted(revoked)}"
        assert not revoked & m.owned, f"{m.name} had partitions revoked that it kept"
    assert p3.owned == (owned_before["p1"] | owned_before["p2"]) - p1.owned - p2.owned
    for task in stateful:
        holders = [m.name for m in (p1, p2, p3) if task in m.info.standby_tasks]
        assert len(holders) == 1 and not any(task in m.info.active_tasks for m in (p1, p2, p3) if m.name in holders)

    # A follower's request_rebalance() starts a real rebalance, twice in a row: the second
    # time its tasks and owned partitions are what it already sent the first time, so only
    # the subscription's changing unique_field keeps the broker from answering with the
    # current generation. With nothing to move, nobody revokes anything.
    members = [p1, p2, p3]
    follower = next(m for m in members if m.name != env["leaders"][-1])
    revocations = {m.name: len(m.listener.revoked) for m in members}
    owned = {m.name: m.owned for m in members}
    for _ in range(2):
        generations = {m.name: m.assignor.generation for m in members}
        request_rebalance(follower.consumer)
        wait_until(lambda before=generations: all(m.assignor.generation > before[m.name] for m in members), 15,
                   f"a rebalance requested by {follower.name}")
        wait_stable(env, members)
    assert {m.name: m.owned for m in members} == owned
    assert {m.name: len(m.listener.revoked) for m in members} == revocations


def test_static_member_restarting_within_the_session_timeout_keeps_its_tasks(env):
    p1 = start(env, "p1", uuid.UUID(int=1), group_instance_id="instance-1")
    p2 = start(env, "p2", uuid.UUID(int=2), group_instance_id="instance-2")
    wait_stable(env, [p1, p2])
    tasks_before = (set(p2.info.active_tasks), set(p2.info.standby_tasks))
    p1_assignments = p1.assignments

    p2.close()  # a static member sends no LeaveGroup: the broker keeps its slot for the session timeout
    env["members"].remove(p2)
    restarted = start(env, "p2-restarted", uuid.UUID(int=2), group_instance_id="instance-2")
    wait_until(lambda: restarted.info is not None, 20, "the restarted static member to get its assignment")
    assert (set(restarted.info.active_tasks), set(restarted.info.standby_tasks)) == tasks_before
    time.sleep(1.0)
    assert p1.assignments == p1_assignments, "the other member saw no rebalance"
    assert restarted.consumer.assignment() == restarted.owned
