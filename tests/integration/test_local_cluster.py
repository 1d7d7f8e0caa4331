"""The local cluster tooling (tools/kafka/cluster.py) against three real KRaft nodes: each
operation is checked against what the cluster itself reports, not against the tool's own
bookkeeping. One cluster for the module; every test leaves it healthy (all nodes up and thawed,
every partition fully in sync)."""

from __future__ import annotations

import json
import os

import pytest
from kafka import KafkaAdminClient, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from tools.kafka.cluster import ClusterError, LocalKafkaCluster
from tools.kafka.topics import committed_offsets, create_topics, numbered_records, produce, read_all
from tools.local_processes import process_state
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

#: The cluster's offsets.topic.num.partitions and transaction.state.log.num.partitions.
INTERNAL_PARTITIONS = 6


@pytest.fixture
def cluster(kafka_cluster: LocalKafkaCluster):
    """The module's cluster, made whole again after the test (nodes started and thawed)."""
    yield kafka_cluster
    for node in kafka_cluster.nodes.values():
        if node.frozen:
            kafka_cluster.thaw_node(node.node_id)
        if not node.running:
            kafka_cluster.start_node(node.node_id)
    kafka_cluster.wait_healthy(None)


def _java_string_hash(text: str) -> int:
    """Java's String.hashCode (for ASCII text), as the brokers place a group or a transactional
    id: partition = abs(hash) % partitions of the internal topic."""
    value = 0
    for char in text:
        value = (31 * value + ord(char)) & 0xFFFFFFFF
    signed = value - (1 << 32) if value >= 1 << 31 else value
    return 0 if signed == -(1 << 31) else abs(signed)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return process_state(pid) != "Z"


def _answering(cluster: LocalKafkaCluster) -> str:
    return ",".join(cluster.node(n).address for n in cluster.answering_nodes())


def _leaders_seen_by_each_node(cluster: LocalKafkaCluster, topic: str, partition: int) -> dict[int, int]:
    """The partition's leader in the metadata of every answering node, each asked on its own."""
    seen = {}
    for node_id in cluster.answering_nodes():
        admin = KafkaAdminClient(bootstrap_servers=cluster.node(node_id).address, request_timeout_ms=10_000)
        try:
            (described,) = admin.describe_topics([topic])
        finally:
            admin.close()
        seen[node_id] = next(p["leader_id"] for p in described["partitions"] if p["partition_index"] == partition)
    return seen


def test_nodes_replication_defaults_and_internal_topics(cluster):
    with cluster.admin() as admin:
        brokers = admin.describe_cluster()["brokers"]
        admin.create_topics([NewTopic("defaults", 2)])  # replication factor: the broker default
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(node_id))
                                          for node_id in cluster.nodes], config_filter="all")
    assert sorted(b["broker_id"] for b in brokers) == [1, 2, 3]
    assert len({b["port"] for b in brokers}) == 3
    pids = {node.process.pid for node in cluster.nodes.values()}
    assert len(pids) == 3 and all(_alive(pid) for pid in pids)

    expected = {"min.insync.replicas": "2", "default.replication.factor": "3",
                "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
                "transaction.state.log.min.isr": "2"}
    for node_id in cluster.nodes:
        described = configs["broker"][str(node_id)]
        assert {name: described[name]["value"] for name in expected} == expected, f"node {node_id}"
    cluster.group_coordinator("defaults-group")  # creates the offsets topic if it is not there yet
    cluster.wait_healthy(["defaults"])
    states = cluster.partitions(["defaults", "__consumer_offsets"])
    assert len([key for key in states if key[0] == "__consumer_offsets"]) == INTERNAL_PARTITIONS
    assert {len(state.replicas) for state in states.values()} == {3}


def test_coordinators_are_the_leaders_of_their_internal_partitions(cluster):
    group, transactional_id = "coordinated-group", "coordinated-transactions"
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=transactional_id)
    try:
        producer.init_transactions()
    finally:
        producer.close()

    group_coordinator = cluster.group_coordinator(group)
    transaction_coordinator = cluster.transaction_coordinator(transactional_id)

    states = cluster.partitions(["__consumer_offsets", "__transaction_state"])
    offsets_partition = _java_string_hash(group) % INTERNAL_PARTITIONS
    transactions_partition = _java_string_hash(transactional_id) % INTERNAL_PARTITIONS
    assert group_coordinator == states[("__consumer_offsets", offsets_partition)].leader
    assert transaction_coordinator == states[("__transaction_state", transactions_partition)].leader
    with cluster.admin() as admin:  # kafka-python's own lookup agrees
        assert admin.describe_transactions([transactional_id])[transactional_id].coordinator_id == \
            transaction_coordinator


def test_moved_leader_is_what_every_node_reports(cluster):
    topic = "moves"
    create_topics(cluster.bootstrap_servers, {topic: 1}, replication_factor=3)
    cluster.wait_healthy([topic])
    before = cluster.leader(topic, 0)
    target = next(n for n in cluster.partitions([topic])[(topic, 0)].replicas if n != before)

    seconds = cluster.move_leader(topic, 0, target)
    print(f"leader of {topic}-0 moved from node {before} to node {target} in {seconds:.1f}s")

    wait_until(lambda: set(_leaders_seen_by_each_node(cluster, topic, 0).values()) == {target}, 10,
               f"every node to name node {target} leader of {topic}-0",
               lambda: repr(_leaders_seen_by_each_node(cluster, topic, 0)))
    assert cluster.partitions([topic])[(topic, 0)].replicas[0] == target  # the preferred replica now
    assert produce(cluster.bootstrap_servers, topic, numbered_records(0, 10, 2), acks="all") == 10
    with pytest.raises(ClusterError, match="node 99 is not an in-sync replica"):
        cluster.move_leader(topic, 0, 99)


def test_clean_stop_hands_leadership_over_and_the_node_rejoins_on_its_storage(cluster):
    topic = "stops"
    create_topics(cluster.bootstrap_servers, {topic: 3}, replication_factor=3)
    cluster.wait_healthy([topic])
    assert produce(cluster.bootstrap_servers, topic, numbered_records(0, 30, 3), acks="all") == 30
    victim = cluster.leader(topic, 0)
    node = cluster.node(victim)
    pid, port, partition_dir = node.process.pid, node.port, node.work_dir / "data" / f"{topic}-0"
    assert partition_dir.is_dir()

    seconds = cluster.stop_node(victim)
    print(f"node {victim} stopped cleanly (SIGTERM) in {seconds:.1f}s")
    assert not _alive(pid)
    # A controlled shutdown hands leadership over before the process ends, not a session timeout later.
    wait_until(lambda: all(s.leader not in (victim, -1) and victim not in s.isr
                           for s in cluster.partitions([topic]).values()),
               5, f"the partitions of {topic} to be led by others than node {victim}",
               lambda: repr(cluster.partitions([topic])))
    # Two of three replicas in sync (min.insync.replicas 2): acks=all writes go on.
    assert produce(_answering(cluster), topic, numbered_records(30, 30, 3), acks="all") == 30

    seconds = cluster.start_node(victim)
    print(f"node {victim} started again in {seconds:.1f}s")
    assert node.process.pid != pid and node.port == port and partition_dir.is_dir()
    cluster.wait_healthy([topic])
    # Led by the restarted node, the partition holds what it had before the stop and what it caught up on.
    cluster.move_leader(topic, 0, victim)
    records = read_all(cluster.bootstrap_servers, topic)
    assert sorted(json.loads(record.value)["n"] for record in records) == list(range(60))


def test_killed_group_coordinator_moves_and_the_offsets_survive(cluster):
    topic, group = "kills", "killed-coordinator-group"
    create_topics(cluster.bootstrap_servers, {topic: 1}, replication_factor=3)
    coordinator = cluster.group_coordinator(group)  # created the offsets topic if it was not there yet
    cluster.wait_healthy([topic])
    with cluster.admin() as admin:
        admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(7, "", -1)})
    pid = cluster.node(coordinator).process.pid

    cluster.kill_node(coordinator)
    assert not _alive(pid)
    # No controlled shutdown: the controller fences the node when its session expires.
    waited = wait_until(lambda: cluster.group_coordinator(group) != coordinator, 60,
                        f"a group coordinator other than the killed node {coordinator}", cluster.logs)
    print(f"group coordinator moved off killed node {coordinator} after {waited:.1f}s")
    # The new coordinator loads the group from its replica of the offsets partition (retriable meanwhile).
    wait_until(lambda: committed_offsets(_answering(cluster), group, topic) == {0: 7}, 30,
               f"the offsets of {group} from its new coordinator",
               lambda: repr(committed_offsets(_answering(cluster), group, topic)))

    cluster.start_node(coordinator)
    cluster.wait_healthy([topic])


def test_frozen_node_loses_its_leadership_and_rejoins_when_thawed(cluster):
    topic = "freezes"
    create_topics(cluster.bootstrap_servers, {topic: 1}, replication_factor=3)
    cluster.wait_healthy([topic])
    # Not the active controller: brokers would wait for their requests to it to time out (30 s)
    # before turning to the next one, which is Kafka's business, not this test's.
    victim = next(n for n in cluster.nodes if n != cluster.active_controller())
    cluster.move_leader(topic, 0, victim)
    pid = cluster.node(victim).process.pid

    cluster.freeze_node(victim)
    assert process_state(pid) == "T"
    waited = wait_until(lambda: cluster.leader(topic, 0) not in (victim, -1), 60,
                        f"a leader of {topic}-0 other than the frozen node {victim}", cluster.logs)
    print(f"leadership of {topic}-0 left frozen node {victim} after {waited:.1f}s")
    assert produce(_answering(cluster), topic, numbered_records(0, 10, 2), acks="all") == 10

    cluster.thaw_node(victim)
    assert process_state(pid) != "T"
    waited = cluster.wait_healthy([topic])
    print(f"thawed node {victim} back in sync after {waited:.1f}s")
    assert cluster.node(victim).process.pid == pid


def test_waits_are_bounded_and_say_what_they_waited_for(cluster):
    with pytest.raises(ClusterError) as info:
        cluster.wait_healthy(["no-such-topic"], timeout=2)
    message = str(info.value)
    assert "timed out after 2s waiting for a healthy cluster" in message
    assert "'no-such-topic': 'missing'" in message
    assert all(f"----- node {n} (pid " in message for n in (1, 2, 3))  # with each node's log tail

    cluster.freeze_node(1)
    with pytest.raises(ClusterError, match=r"nodes \[1\] are stopped or frozen"):
        cluster.wait_healthy()
    with pytest.raises(ClusterError, match="node 1 is already frozen"):
        cluster.freeze_node(1)
    cluster.thaw_node(1)
