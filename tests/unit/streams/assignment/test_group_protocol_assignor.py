"""StreamsPartitionAssignor without a broker: a simulated group runs kafka-python's side of
the protocol (metadata -> wire -> leader assign() -> wire -> on_assignment, with the
cooperative coordinator's revocation and follow-up rejoin) over synthetic cluster metadata.
"""

from __future__ import annotations

import dataclasses
import types
import uuid
from collections.abc import Mapping

import pytest
from kafka.coordinator.assignors.abstract import RebalanceProtocol
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.structs import TopicPartition as TP

from airflow_stateful_provider.streams.assignment.assignment_configs import AssignmentConfigs
from airflow_stateful_provider.streams.assignment.assignment_info import AssignmentInfo, AssignorError
from airflow_stateful_provider.streams.assignment.lag import LATEST_OFFSET
from airflow_stateful_provider.streams.assignment.streams_partition_assignor import (
    AssignorContext,
    StreamsPartitionAssignor,
)
from airflow_stateful_provider.streams.errors import ConfigError, GroupProtocolError, IllegalStateError
from airflow_stateful_provider.streams.kafka.group_join import request_rebalance
from airflow_stateful_provider.streams.processor import Processor
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topology.topology import Topology

APP = "app"
NOW = 1_000_000
INTERVAL = 60_000
P1, P2, P3 = (uuid.UUID(int=i) for i in (1, 2, 3))


def t(text: str) -> TaskId:
    return TaskId.parse(text)


def tasks(*texts: str) -> frozenset[TaskId]:
    return frozenset(t(x) for x in texts)


@dataclasses.dataclass
class StoreSpec:
    """What the topology and the assignor read of a store builder (the real ones live in the
    runtime; the assignment package never builds stores)."""

    name: str
    logging_enabled: bool = True


class Noop(Processor):
    def process(self, record):
        pass


def topology(*, unlogged: bool = False) -> Topology:
    """Subtopology 0: ``counts-in`` -> a processor with logged store ``counts`` (stateful);
    subtopology 1: ``events-in`` -> ``out`` (stateless); with ``unlogged``, subtopology 2:
    ``cache-in`` -> a processor whose store has logging disabled."""
    top = Topology()
    top.add_source("src-counts", "counts-in")
    top.add_processor("count", Noop, "src-counts")
    top.add_state_store(StoreSpec("counts"), "count")
    top.add_source("src-events", "events-in")
    top.add_processor("pass", Noop, "src-events")
    top.add_sink("sink", "out", "pass")
    if unlogged:
        top.add_source("src-cache", "cache-in")
        top.add_processor("cache", Noop, "src-cache")
        top.add_state_store(StoreSpec("cache", logging_enabled=False), "cache")
    return top


TOPICS = ["counts-in", "events-in"]
CHANGELOG = f"{APP}-counts-changelog"


class Cluster:
    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = dict(counts)

    def partitions_for_topic(self, topic):
        n = self.counts.get(topic)
        return set(range(n)) if n else None


class Member:
    """One stream thread: its consumer's owned partitions and its last AssignmentInfo."""

    def __init__(self, group: Group, member_id: str, process_id: uuid.UUID, *, endpoint: str = "",
                 tags: Mapping[str, str] | None = None, protocol=RebalanceProtocol.COOPERATIVE) -> None:
        self.group = group
        self.member_id = member_id
        self.process_id = process_id
        self.owned: frozenset[TP] = frozenset()
        self.info: AssignmentInfo | None = None
        self.revoked: list[frozenset[TP]] = []
        self.assignor = StreamsPartitionAssignor(AssignorContext(
            process_id=process_id, application_id=APP, topology=group.topology,
            fetch_end_offsets=group.fetch_end_offsets, on_assignment=self._on_assignment,
            configs=group.configs, client_tags=tags or {}, endpoint=endpoint,
            previous_active_tasks=lambda: set(self.info.active_tasks) if self.info else set(),
            previous_standby_tasks=lambda: set(self.info.standby_tasks) if self.info else set(),
            task_offset_sums=lambda: group.offset_sums(self),
            owned_partitions=lambda: self.owned, clock_ms=lambda: group.now,
        ), rebalance_protocol=protocol)

    def _on_assignment(self, info, partitions):
        assert partitions == info.active_partitions
        self.info = info

    @property
    def active(self) -> frozenset[TaskId]:
        return frozenset(self.info.active_tasks) if self.info else frozenset()

    @property
    def standby(self) -> frozenset[TaskId]:
        return frozenset(self.info.standby_tasks) if self.info else frozenset()


class Group:
    def __init__(self, configs: AssignmentConfigs, partitions: int = 4, *, top: Topology | None = None,
                 extra_topics: Mapping[str, int] | None = None) -> None:
        self.topology = top or topology()
        self.configs = configs
        self.cluster = Cluster({topic: partitions for topic in TOPICS} | dict(extra_topics or {}))
        self.members: list[Member] = []
        self.now = NOW
        self.generation = 0
        #: Changelog end offsets by partition; None makes the fetch fail.
        self.end_offsets: dict[TP, int] | None = {TP(CHANGELOG, p): 0 for p in range(partitions)}
        #: Per process: task -> offset sum of its local state (running actives report -2 anyway).
        self.local_state: dict[uuid.UUID, dict[TaskId, int]] = {}
        self.fetches = 0
        #: Members whose previous actives are not running (restarted): they report no -2.
        self.restarted: set[str] = set()

    def add(self, member_id: str, process_id: uuid.UUID, **kwargs) -> Member:
        member = Member(self, member_id, process_id, **kwargs)
        self.members.append(member)
        return member

    def remove(self, member: Member) -> None:
        self.members.remove(member)

    def fetch_end_offsets(self, partitions):
        self.fetches += 1
        if self.end_offsets is None:
            raise ConnectionError("broker unreachable")
        return {tp: self.end_offsets[tp] for tp in partitions if tp in self.end_offsets}

    def offset_sums(self, member: Member) -> dict[TaskId, int]:
        sums = dict(self.local_state.get(member.process_id, {}))
        if member.member_id not in self.restarted:
            sums.update({task: LATEST_OFFSET for task in member.active})
        return sums

    def rebalance(self, leader: Member | None = None) -> dict[str, AssignmentInfo]:
        """One JoinGroup/SyncGroup round as kafka-python runs it; checks the cooperative rule."""
        self.generation += 1
        leader = leader or self.members[0]
        joined = [
            types.SimpleNamespace(
                member_id=m.member_id, group_instance_id=None,
                metadata=ConsumerProtocolSubscription.decode(m.assignor.metadata(TOPICS).encode()))
            for m in self.members
        ]
        owned_before = {m.member_id: m.owned for m in self.members}
        out = leader.assignor.assign(self.cluster, joined)
        assert set(out) == {m.member_id for m in self.members}
        infos = {}
        for m in self.members:
            assignment = ConsumerProtocolAssignment.decode(out[m.member_id].encode())
            new = frozenset(assignment.partitions())
            if m.assignor.cooperative:
                others = set().union(*(o for mid, o in owned_before.items() if mid != m.member_id))
                assert not (new - m.owned) & others, f"{m.member_id} got partitions another member still owns"
                m.revoked.append(m.owned - new)
            m.owned = new
            m.assignor.on_assignment(assignment, self.generation)
            infos[m.member_id] = m.info
        return infos

    def needs_followup(self) -> bool:
        """kafka-python rejoins after revoking; the thread rejoins when told to at once."""
        return any(m.revoked and m.revoked[-1] for m in self.members) or any(
            m.info.next_rebalance_ms == 0 for m in self.members)

    def settle(self, max_rounds: int = 4) -> int:
        for rounds in range(1, max_rounds + 1):
            self.rebalance()
            if not self.needs_followup():
                return rounds
        raise AssertionError(f"group did not settle in {max_rounds} rounds")

    def by_process(self, pid: uuid.UUID) -> list[Member]:
        return [m for m in self.members if m.process_id == pid]

    def client_tasks(self, pid: uuid.UUID, role: str) -> frozenset[TaskId]:
        return frozenset().union(*(getattr(m, role) for m in self.by_process(pid)))


def all_partitions(partitions: int = 4) -> set[TP]:
    return {TP(topic, p) for topic in TOPICS for p in range(partitions)}


STANDBY_1 = AssignmentConfigs(num_standby_replicas=1, probing_rebalance_interval_ms=INTERVAL)
CONFIG_A = AssignmentConfigs(acceptable_recovery_lag=100, max_warmup_replicas=2, num_standby_replicas=0,
                             probing_rebalance_interval_ms=INTERVAL)


# ---------------------------------------------------------------------------- a fresh group


def test_fresh_group_three_processes_four_threads_with_standbys():
    group = Group(STANDBY_1)
    a1, a2 = group.add("a-1", P1), group.add("a-2", P1)
    b = group.add("b", P2)
    c = group.add("c", P3)
    assert group.settle() == 1
    members = [a1, a2, b, c]
    # every task active exactly once; partitions follow their tasks
    actives = [task for m in members for task in m.active]
    assert sorted(actives) == sorted(tasks(*(f"{s}_{p}" for s in (0, 1) for p in range(4))))
    for m in members:
        assert m.owned == {TP(TOPICS[task.subtopology], task.partition) for task in m.active}
        for task, parts in m.info.active_tasks.items():
            assert parts == {TP(TOPICS[task.subtopology], task.partition)}
        for task, parts in m.info.standby_tasks.items():
            assert parts == {TP(CHANGELOG, task.partition)} and task.subtopology == 0
    assert set().union(*(m.owned for m in members)) == all_partitions()
    # one standby per stateful task, never on the process running it; stateless tasks have none
    for p in range(4):
        task = TaskId(0, p)
        holders = [pid for pid in (P1, P2, P3) if task in group.client_tasks(pid, "standby")]
        owner = [pid for pid in (P1, P2, P3) if task in group.client_tasks(pid, "active")]
        assert len(holders) == 1 and len(owner) == 1 and holders != owner
    assert not any(task.subtopology == 1 for m in members for task in m.standby)
    # balanced per thread: 8 actives over 4 threads, 4 standbys
    assert sorted(len(m.active) for m in members) == [2, 2, 2, 2]
    assert sorted(len(m.active) + len(m.standby) for m in members) == [3, 3, 3, 3]
    # everyone caught up (empty changelogs): no warmups, no probing, no follow-up
    assert all(m.info.warmup_tasks == set() and m.info.next_rebalance_ms == -1 for m in members)
    assert all(m.revoked == [frozenset()] for m in members)


def test_stable_group_keeps_everything_on_the_next_rebalance():
    group = Group(STANDBY_1)
    for mid, pid in (("a-1", P1), ("a-2", P1), ("b", P2), ("c", P3)):
        group.add(mid, pid)
    group.settle()
    before = {m.member_id: (m.active, m.standby) for m in group.members}
    group.rebalance(leader=group.members[2])  # any member may lead
    assert {m.member_id: (m.active, m.standby) for m in group.members} == before
    assert all(not m.revoked[-1] for m in group.members)


def test_unlogged_store_subtopology_is_assigned_as_stateless():
    group = Group(STANDBY_1, top=topology(unlogged=True), extra_topics={"cache-in": 2})
    group.add("a", P1), group.add("b", P2)
    group.settle()
    assert group.client_tasks(P1, "active") | group.client_tasks(P2, "active") >= tasks("2_0", "2_1")
    assert not any(task.subtopology == 2 for m in group.members for task in m.standby)
    assert group.members[0].assignor.last_result is not None


def test_endpoints_map_hosts_to_partitions():
    group = Group(STANDBY_1, partitions=2)
    a = group.add("a", P1, endpoint="host-a:7000")
    b = group.add("b", P2, endpoint="host-b:7000")
    group.add("c", P3)  # no endpoint: not listed
    group.settle()
    info = a.info
    assert info.partitions_by_host == b.info.partitions_by_host
    assert set(info.partitions_by_host) == {"host-a:7000", "host-b:7000"}
    assert info.partitions_by_host["host-a:7000"] == a.owned
    assert info.partitions_by_host["host-b:7000"] == b.owned
    for host, member in (("host-a:7000", a), ("host-b:7000", b)):
        standby_inputs = {TP("counts-in", task.partition) for task in member.standby}
        assert info.standby_partitions_by_host.get(host, frozenset()) == standby_inputs


# ---------------------------------------------------------------------------- lags, warmups, probing


def test_semantics_scenario_a_through_the_protocol_with_cooperative_two_phase_move():
    """docs/semantics.md §3, config A: P1 was active on the stateful task but lags 500, P2 has lag 0.
    -> P1 active on the stateless task + warmup; P2 active on the stateful task; probing.
    Cooperative: P1 still owns the stateful task's partition, so round 1 leaves it
    unassigned (P1 revokes it, P2 is told to rebalance at once); round 2 gives it to P2."""
    group = Group(CONFIG_A, partitions=1)
    p1, p2 = group.add("p1", P1), group.add("p2", P2)
    # history: P1 ran 0_0 and 1_0
    p1.owned = frozenset({TP("counts-in", 0), TP("events-in", 0)})
    p1.info = AssignmentInfo(active_tasks={t("0_0"): {TP("counts-in", 0)}, t("1_0"): {TP("events-in", 0)}})
    group.end_offsets = {TP(CHANGELOG, 0): 1000}
    group.local_state = {P1: {t("0_0"): 500}, P2: {t("0_0"): 1000}}
    group.restarted.add("p1")  # P1 restarted: it reports its checkpointed sum, not -2

    first = group.rebalance()
    assert first["p1"].active_tasks.keys() == {t("1_0")}
    assert first["p1"].warmup_tasks == {t("0_0")} and set(first["p1"].standby_tasks) == {t("0_0")}
    assert p1.revoked[-1] == {TP("counts-in", 0)}          # only the moving partition
    assert first["p2"].active_tasks == {}                  # withheld: P1 still owned it
    assert first["p2"].next_rebalance_ms == 0
    assert group.fetches == 1

    second = group.rebalance()
    assert set(second["p2"].active_tasks) == {t("0_0")} and p2.owned == {TP("counts-in", 0)}
    assert set(second["p1"].active_tasks) == {t("1_0")} and second["p1"].warmup_tasks == {t("0_0")}
    assert p1.revoked[-1] == frozenset()                   # the stateless task never moved
    probes = [m.info.next_rebalance_ms for m in group.members]
    assert probes == [NOW + INTERVAL, NOW + INTERVAL]  # the first (only) member of each client
    assert group.members[0].assignor.last_result.probing_rebalance_needed


def test_warmup_caught_up_becomes_active_at_the_probe_and_previous_owner_stops_only_then():
    group = Group(AssignmentConfigs(acceptable_recovery_lag=10, num_standby_replicas=0,
                                    probing_rebalance_interval_ms=INTERVAL), partitions=2)
    p1 = group.add("p1", P1)
    group.end_offsets = {TP(CHANGELOG, 0): 1000, TP(CHANGELOG, 1): 1000}
    group.settle()
    assert p1.active == tasks("0_0", "0_1", "1_0", "1_1")
    p2 = group.add("p2", P2)  # new, no state: lag 1000 > 10
    assert group.settle() == 2  # the stateless tasks move at once (two-phase: revoke, then assign)
    assert p1.active == tasks("0_0", "0_1")   # stateful actives stay on the caught-up owner
    assert p2.active == tasks("1_0", "1_1")
    assert p2.info.warmup_tasks == tasks("0_1") == set(p2.info.standby_tasks)
    warm = t("0_1")
    probe_times = {m.info.next_rebalance_ms for m in group.members} - {-1}
    assert probe_times == {group.now + INTERVAL}
    # the warmup catches up; the probing rebalance fires at its time
    group.local_state[P2] = {warm: 995}
    group.now += INTERVAL
    group.rebalance()
    # round 1 of the move: P1 stops the task only now; P2 keeps its copy as a standby meanwhile
    assert warm not in p1.active and TP("counts-in", warm.partition) in p1.revoked[-1]
    assert warm not in p2.active and warm in p2.standby and p2.info.next_rebalance_ms == 0
    group.rebalance()
    assert warm in p2.active and warm not in p1.active
    assert warm not in p2.info.warmup_tasks


def test_end_offsets_failure_falls_back_to_previous_owners_and_schedules_a_followup():
    group = Group(STANDBY_1, partitions=2)
    p1, p2 = group.add("p1", P1), group.add("p2", P2)
    group.settle()
    before = {m.member_id: (m.active, m.standby) for m in group.members}
    group.end_offsets = None
    infos = group.rebalance()
    assert {m.member_id: (m.active, m.standby) for m in group.members} == before
    times = sorted(i.next_rebalance_ms for i in infos.values())
    assert times == [NOW + INTERVAL, NOW + INTERVAL]  # one member per client
    assert p1.revoked[-1] == p2.revoked[-1] == frozenset()


def test_incomplete_end_offsets_also_fall_back():
    group = Group(STANDBY_1, partitions=2)
    group.add("p1", P1), group.add("p2", P2)
    group.settle()
    group.end_offsets = {TP(CHANGELOG, 0): 10}  # partition 1 missing
    infos = group.rebalance()
    assert NOW + INTERVAL in {i.next_rebalance_ms for i in infos.values()}


def test_new_member_joining_revokes_only_partitions_that_move():
    group = Group(STANDBY_1)
    p1, p2 = group.add("p1", P1), group.add("p2", P2)
    group.settle()
    owned_before = {m.member_id: m.owned for m in (p1, p2)}
    p3 = group.add("p3", P3)
    rounds = group.settle()
    assert rounds == 2
    for m in (p1, p2):
        revoked = frozenset().union(*m.revoked[1:])
        assert revoked == owned_before[m.member_id] - m.owned   # revoked exactly what moved away
        assert not revoked & m.owned                             # nothing revoked that stayed
    assert p3.owned and p3.owned == set().union(*(owned_before.values())) - p1.owned - p2.owned
    assert set().union(p1.owned, p2.owned, p3.owned) == all_partitions()


def test_thread_moves_inside_one_process_are_two_phase_too():
    group = Group(CONFIG_A)
    a1 = group.add("a-1", P1)
    group.settle()
    a2 = group.add("a-2", P1)
    assert group.settle() == 2
    assert len(a1.active) == len(a2.active) == 4
    assert a1.owned.isdisjoint(a2.owned)


def test_eager_protocol_sends_no_owned_partitions_and_moves_in_one_round():
    group = Group(STANDBY_1)
    p1 = group.add("p1", P1, protocol=RebalanceProtocol.EAGER)
    group.settle()
    assert p1.assignor.metadata(TOPICS).owned_partitions == []
    assert p1.assignor.supported_protocols() == [RebalanceProtocol.EAGER]
    p2 = group.add("p2", P2, protocol=RebalanceProtocol.EAGER)
    group.rebalance()
    assert p1.owned and p2.owned and p2.info.next_rebalance_ms == -1


# ---------------------------------------------------------------------------- errors and versions


def test_missing_source_topic_assigns_nothing_with_an_error_code():
    group = Group(STANDBY_1)
    group.cluster.counts.pop("events-in")
    group.add("p1", P1), group.add("p2", P2)
    infos = group.rebalance()
    assert {i.error for i in infos.values()} == {AssignorError.INCOMPLETE_SOURCE_TOPIC_METADATA}
    assert all(m.owned == frozenset() for m in group.members)


def test_source_topics_not_copartitioned_is_an_assignment_error():
    top = topology()
    top.add_source("src-extra", "extra-in")
    top.add_processor("join", Noop, "src-extra")
    top.connect_processor_and_state_stores("join", "counts")  # joins subtopology 0 with extra-in
    group = Group(STANDBY_1, top=top, extra_topics={"extra-in": 3})
    group.add("p1", P1)
    infos = group.rebalance()
    assert infos["p1"].error is AssignorError.ASSIGNMENT_ERROR


def test_shutdown_request_reaches_every_member():
    group = Group(STANDBY_1)
    p1, p2 = group.add("p1", P1), group.add("p2", P2)
    group.settle()
    p2.assignor.request_application_shutdown()
    infos = group.rebalance()
    assert {i.error for i in infos.values()} == {AssignorError.SHUTDOWN_REQUESTED}
    assert p1.owned == p2.owned == frozenset()


def test_member_of_a_newer_release_gets_version_probing_and_others_proceed():
    group = Group(STANDBY_1, partitions=2)
    p1 = group.add("p1", P1)
    future = group.add("future", P2)
    real_metadata = future.assignor.metadata

    def newer_metadata(topics):
        sub = real_metadata(topics)
        sub.user_data = b"\x00\x00\x00\x02\x00\x00\x00\x02" + b"v2 body"
        return sub

    future.assignor.metadata = newer_metadata  # type: ignore[method-assign]
    infos = group.rebalance()
    assert infos["future"].error is AssignorError.VERSION_PROBING
    assert infos["future"].next_rebalance_ms == 0 and future.owned == frozenset()
    assert infos["future"].latest_supported_version == 1
    assert p1.owned == all_partitions(2) and infos["p1"].error is AssignorError.NONE


def test_unreadable_subscription_gets_an_assignment_error():
    group = Group(STANDBY_1, partitions=2)
    p1, bad = group.add("p1", P1), group.add("bad", P2)
    real_metadata = bad.assignor.metadata

    def garbage(topics):
        sub = real_metadata(topics)
        sub.user_data = b"\x00\x00\x00\x01\x00\x00\x00\x01\x01"  # truncated
        return sub

    bad.assignor.metadata = garbage  # type: ignore[method-assign]
    infos = group.rebalance()
    assert infos["bad"].error is AssignorError.ASSIGNMENT_ERROR
    assert p1.owned == all_partitions(2)


# ---------------------------------------------------------------------------- member side


def test_metadata_changes_on_every_join_and_reports_owned_partitions():
    group = Group(STANDBY_1)
    m = group.add("m", P1)
    m.owned = frozenset({TP("counts-in", 2), TP("counts-in", 0), TP("events-in", 1)})
    first, second = m.assignor.metadata(TOPICS), m.assignor.metadata(TOPICS)
    assert first.user_data != second.user_data
    assert [(e.topic, e.partitions) for e in first.owned_partitions] == [("counts-in", [0, 2]), ("events-in", [1])]
    assert first.version == 1 and first.topics == TOPICS


def test_without_owned_partitions_callable_the_last_assignment_counts():
    group = Group(STANDBY_1)
    ctx = group.add("m", P1).assignor.context
    assignor = StreamsPartitionAssignor(AssignorContext(
        ctx.process_id, APP, ctx.topology, ctx.fetch_end_offsets, lambda info, parts: None))
    info = AssignmentInfo(active_tasks={t("0_1"): {TP("counts-in", 1)}})
    assignor.on_assignment(ConsumerProtocolAssignment(1, [("counts-in", [1])], info.encode()), 3)
    assert [(e.topic, e.partitions) for e in assignor.metadata(TOPICS).owned_partitions] == [("counts-in", [1])]
    assert assignor.generation == 3 and assignor.assignment_info == info


def test_on_assignment_refuses_inconsistent_or_missing_data():
    group = Group(STANDBY_1)
    m = group.add("m", P1)
    info = AssignmentInfo(active_tasks={t("0_1"): {TP("counts-in", 1)}})
    wrong = ConsumerProtocolAssignment(1, [("counts-in", [2])], info.encode())
    with pytest.raises(GroupProtocolError, match="generation 7: assigned partitions .* differ"):
        m.assignor.on_assignment(wrong, 7)
    with pytest.raises(GroupProtocolError, match="carries no streams assignment data"):
        m.assignor.on_assignment(ConsumerProtocolAssignment(1, [], b""), 8)


def test_request_rebalance_sets_the_coordinator_rejoin_flag():
    calls = []
    consumer = types.SimpleNamespace(config={"group_id": "app"},
                                     _coordinator=types.SimpleNamespace(request_rejoin=lambda: calls.append(1)))
    request_rebalance(consumer)
    assert calls == [1]
    with pytest.raises(IllegalStateError, match="SimpleNamespace: it has no group coordinator"):
        request_rebalance(types.SimpleNamespace())
    consumer.config = {"group_id": None}
    with pytest.raises(IllegalStateError, match="it has no group_id"):
        request_rebalance(consumer)


@pytest.mark.parametrize("overrides, message", [
    ({"process_id": "p1"}, "process_id must be a uuid.UUID, got str 'p1'"),
    ({"application_id": ""}, "application_id must be a non-empty str"),
    ({"topology": object()}, "topology must be a Topology, got object"),
    ({"configs": {}}, "configs must be AssignmentConfigs, got dict"),
    ({"endpoint": "nohost"}, "endpoint must look like 'host:port'"),
    ({"client_tags": {"z": 1}}, "client_tags must map str to str"),
    ({"on_assignment": None}, "on_assignment must be callable, got None"),
    ({"owned_partitions": 5}, "owned_partitions must be callable or None, got 5"),
])
def test_context_values_are_checked(overrides, message):
    fields = dict(process_id=P1, application_id=APP, topology=topology(), fetch_end_offsets=lambda parts: {},
                  on_assignment=lambda info, parts: None)
    fields.update(overrides)
    with pytest.raises(ConfigError, match=message):
        AssignorContext(**fields)


def test_assignor_declares_the_stream_protocol_and_cooperative_rebalancing():
    assignor = StreamsPartitionAssignor(AssignorContext(P1, APP, topology(), lambda parts: {}, lambda i, p: None))
    assert assignor.name == "stream"
    assert assignor.supported_protocols() == [RebalanceProtocol.COOPERATIVE]
    with pytest.raises(ConfigError, match="context must be an AssignorContext, got dict"):
        StreamsPartitionAssignor({})  # type: ignore[arg-type]


def test_probing_time_goes_to_one_thread_per_client():
    group = Group(AssignmentConfigs(acceptable_recovery_lag=10, probing_rebalance_interval_ms=INTERVAL), partitions=4)
    group.end_offsets = {TP(CHANGELOG, p): 1000 for p in range(4)}
    group.add("a-1", P1), group.add("a-2", P1)
    group.settle()
    group.add("b-1", P2), group.add("b-2", P2)  # no state: warmups, probing
    group.settle()
    for pid in (P1, P2):
        times = [m.info.next_rebalance_ms for m in group.by_process(pid)]
        assert sorted(times) == [-1, NOW + INTERVAL], times
    warmups = group.client_tasks(P2, "standby")
    assert warmups and all(w in m.info.warmup_tasks for m in group.by_process(P2) for w in m.standby)


def test_changelog_topics_agree_with_the_runtime_internal_topics():
    from airflow_stateful_provider.streams.assignment.task_partitions import task_partitions
    from airflow_stateful_provider.streams.topics.internal_topics import changelog_topic_configs

    top = topology(unlogged=True)
    counts = {"counts-in": 3, "events-in": 2, "cache-in": 2}
    expected = changelog_topic_configs(top, APP, counts)
    found = task_partitions(top, APP, counts).changelog_partitions
    for topic in expected.values():
        for p in range(topic.partitions):
            assert TP(topic.name, p) in found[TaskId(topic.subtopology, p)]
    assert {tp.topic for parts in found.values() for tp in parts} == {t.name for t in expected.values()}
