"""Members that work between short polls still join their group when the leader's assignment
is slow (kafka/group_join.py). Without keep_completed_join_results, kafka-python 3.0.12
started a new JoinGroup whenever a join completed between two polls: in this scenario the
group went through 18 generations in 25 s and no member ever got a partition."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from kafka import KafkaConsumer
from kafka.coordinator.assignors.range import RangePartitionAssignor

from airflow_stateful_provider.streams.kafka.group_join import keep_completed_join_results
from tools.kafka.topics import create_topics

pytestmark = pytest.mark.kafka


class SlowRangeAssignor(RangePartitionAssignor):
    """The leader takes a second to assign, as ours does while it fetches changelog end offsets."""

    name = "slow-range"

    @classmethod
    def assign(cls, cluster, members):
        time.sleep(1.0)
        return super().assign(cluster, members)


def test_busy_members_join_despite_a_slow_leader(bootstrap_servers):
    topic, group = f"join-{uuid.uuid4().hex[:6]}", f"join-group-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap_servers, {topic: 4})
    stop = threading.Event()
    seen: dict[int, dict] = {}
    errors: list[BaseException] = []

    def member(index: int) -> None:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=group, enable_auto_commit=False,
                                 partition_assignment_strategy=[SlowRangeAssignor], session_timeout_ms=6000,
                                 heartbeat_interval_ms=1000)
        try:
            assert keep_completed_join_results(consumer)
            consumer.subscribe([topic])
            generations: set[int] = set()
            while not stop.is_set():
                consumer.poll(timeout_ms=0)
                time.sleep(0.3)  # processing between polls: the join completes meanwhile
                generation = consumer._coordinator._generation.generation_id
                generations.add(generation)
                seen[index] = {"generation": generation, "generations": len(generations),
                               "partitions": sorted(tp.partition for tp in consumer.assignment())}
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.5)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (
            len(seen) == 2 and sorted(seen[0]["partitions"] + seen[1]["partitions"]) == [0, 1, 2, 3]):
        time.sleep(0.2)
    settled = dict(seen)
    time.sleep(5)  # and it stays settled
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert sorted(settled[0]["partitions"] + settled[1]["partitions"]) == [0, 1, 2, 3], settled
    assert seen[0]["generation"] == settled[0]["generation"] and seen[1]["generation"] == settled[1]["generation"]
    assert max(s["generations"] for s in seen.values()) <= 3, seen


def test_a_leader_rejoining_for_new_metadata_finishes_its_join(bootstrap_servers):
    """The leader rejoins because the topic gained partitions (a metadata change: kafka-python's
    ``rejoin_needed`` stays false) and polls with timeout 0 while the JoinGroup waits for the
    other member. Performing the assignment inside the join task ends that need_rejoin()
    condition, so without the fix no poll completed the join: the leader stayed REBALANCING
    with heartbeats off, was evicted after the session timeout and the other member took
    every partition (bench/group_dropout.py, kafka/group_join.py)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions

    topic, group = f"join-{uuid.uuid4().hex[:6]}", f"join-group-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap_servers, {topic: 2})
    stop = threading.Event()
    seen: dict[int, dict] = {}
    errors: list[BaseException] = []

    def member(index: int) -> None:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=group, enable_auto_commit=False,
                                 session_timeout_ms=6000, heartbeat_interval_ms=1000, metadata_max_age_ms=1000)
        try:
            assert keep_completed_join_results(consumer)
            consumer.subscribe([topic])
            while not stop.is_set():
                consumer.poll(timeout_ms=0)
                time.sleep(0.3)  # processing between polls: the join completes meanwhile
                coordinator = consumer._coordinator
                seen[index] = {"generation": coordinator._generation.generation_id, "leader": coordinator._is_leader,
                               "state": str(coordinator.state),
                               "partitions": sorted(tp.partition for tp in consumer.assignment())}
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            consumer.close()

    def settled(partitions: int) -> bool:
        return len(seen) == 2 and sorted(seen[0]["partitions"] + seen[1]["partitions"]) == list(range(partitions)) \
            and all(s["partitions"] for s in seen.values()) and seen[0]["generation"] == seen[1]["generation"]

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(2)]
    threads[0].start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (seen.get(0, {}).get("partitions")):
        time.sleep(0.1)  # member 0 joins first: it stays the leader
    threads[1].start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not settled(2):
        time.sleep(0.2)
    assert settled(2) and seen[0]["leader"], seen
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.create_partitions({topic: NewPartitions(total_count=6)})
    finally:
        admin.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not settled(6):
        time.sleep(0.2)
    first = dict(seen)
    time.sleep(8)  # longer than the session timeout: a leader stuck in its join would be evicted
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert settled(6), (first, seen)
    assert all("stable" in s["state"].lower() for s in seen.values()), seen
    assert seen[0]["partitions"] and seen[1]["partitions"], seen


def test_consumers_without_a_group_coordinator_are_left_alone():
    class NoCoordinator:
        pass

    assert keep_completed_join_results(NoCoordinator()) is False
