"""Exactly-once through broker outages on a replicated 3-node cluster (tools/kafka/cluster.py):
an instance starting while one bootstrap broker is down, and the whole cluster unavailable for
two minutes under two applications at once: one waits, says so, and resumes without loss; the
other's ``task_timeout_ms`` is shorter than the outage: its thread fails with TaskTimeoutError
within a bound, and ``close()`` completes. The oracle is the counting application's (failure_oracle.py): every key's
read_committed output is exactly 1..n and the store holds n, after a restart where one was
needed."""

from __future__ import annotations

import sys
import time
import uuid
from collections import Counter

import pytest

from airflow_stateful_provider.streams import KafkaStreams, KafkaStreamsState
from airflow_stateful_provider.streams.errors import TaskTimeoutError
from tests.integration.failure_oracle import CountingApp, assert_exact, produce_numbered
from tools.kafka.cluster import LocalKafkaCluster
from tools.kafka.topics import create_topics, produce
from tools.waits import wait_progressing, wait_until

pytestmark = pytest.mark.kafka

#: How long the whole cluster stays down while the instance keeps running.
OUTAGE_SECONDS = 120
#: A task timeout short enough for the test, long enough for the brokers to be back first.
TASK_TIMEOUT_MS = 15_000
#: Each transactional call's bound (the producer's max_block_ms) in these tests.
CALL_BOUND_MS = 5_000
RECORDS = 20_000
#: Input written after the brokers return, and again after a leader moved: what shows that
#: processing resumed (the first RECORDS may all be done before the outage).
RECORDS_AFTER_RETURN = 2_000
KEYS = 50


@pytest.fixture
def cluster(kafka_cluster: LocalKafkaCluster):
    """The module's cluster, made whole again after the test."""
    yield kafka_cluster
    _start_stopped(kafka_cluster)
    kafka_cluster.wait_healthy()


def _start_stopped(cluster: LocalKafkaCluster) -> None:
    """Start every stopped node at once: one node alone has no controller quorum to join."""
    cluster.start_nodes()


def _kill_all(cluster: LocalKafkaCluster) -> None:
    for node_id in list(cluster.nodes):
        cluster.kill_node(node_id)


def counting_app(cluster: LocalKafkaCluster, state_dir, **config) -> CountingApp:
    app = CountingApp(cluster.bootstrap_servers, uuid.uuid4().hex[:8], state_dir,
                      processing_guarantee="exactly_once_v2", replication_factor=3, commit_interval_ms=200, **config)
    app.create_topics(replication_factor=3)
    return app


def started_on_input(app: CountingApp, **overrides) -> tuple[dict[str, int], KafkaStreams, list[BaseException]]:
    """RECORDS input records, and a started instance (``overrides`` to its config): the
    records per key, the instance and what its uncaught-exception handler sees."""
    expected = produce_numbered(app.bootstrap_servers, app.input, RECORDS, KEYS, start_ms=int(time.time() * 1000))
    streams = app.streams(**overrides)
    seen: list[BaseException] = []
    streams.set_uncaught_exception_handler(seen.append)
    streams.start()
    return expected, streams, seen


def test_an_instance_starts_while_a_bootstrap_broker_is_down(cluster, tmp_path):
    """A redeploy during a broker's patch: the first bootstrap broker is down, the others answer."""
    app = counting_app(cluster, tmp_path)
    expected = produce_numbered(cluster.bootstrap_servers, app.input, 2_000, KEYS, start_ms=int(time.time() * 1000))
    app.run_to_end()  # the internal topics exist (RF 3 needs three live brokers to create them)
    first, *others = sorted(cluster.nodes)
    cluster.stop_node(first)
    live = ",".join(cluster.node(n).address for n in others)
    more = produce_numbered(live, app.input, 2_000, KEYS, start_ms=int(time.time() * 1000))
    expected = dict(Counter(expected) + Counter(more))
    app.bootstrap_servers = live
    app.run_to_end(bootstrap_servers=[cluster.node(first).address, *[cluster.node(n).address for n in others]])
    assert_exact(app.outputs_per_key(), app.store_counts(), expected)


def test_a_consumers_offsets_follow_a_partition_leader_that_moved(cluster):
    """kafka-python 3.0.12 asked the old leader again and again (NOT_LEADER_OR_FOLLOWER, about
    2,000 requests a second) until its metadata aged out after 5 minutes: a stream thread's
    changelog offsets failed for that long after a leader election (kafka/list_offsets.py)."""
    from kafka import KafkaConsumer, TopicPartition

    from airflow_stateful_provider.streams.kafka.clients import construct_client

    topic = f"moved-{uuid.uuid4().hex[:8]}"
    create_topics(cluster.bootstrap_servers, {topic: 1}, replication_factor=3)
    cluster.wait_healthy([topic])
    produce(cluster.bootstrap_servers, topic, [(b"k", b"v")] * 10, acks="all")
    consumer = construct_client(KafkaConsumer, {"bootstrap_servers": cluster.bootstrap_servers,
                                                "enable_auto_commit": False})
    try:
        tp = TopicPartition(topic, 0)
        assert consumer.end_offsets([tp], timeout_ms=10_000) == {tp: 10}  # the consumer knows the leader
        leader = cluster.leader(topic, 0)
        cluster.move_leader(topic, 0, next(n for n in sorted(cluster.nodes) if n != leader))
        started = time.monotonic()
        assert consumer.end_offsets([tp], timeout_ms=10_000) == {tp: 10}
        print(f"\nend offsets from the new leader after {time.monotonic() - started:.2f} s", file=sys.stderr)
    finally:
        consumer.close()


def test_the_whole_cluster_down_for_two_minutes_and_past_the_task_timeout(cluster, tmp_path):
    """One outage, two applications: ``patient`` (task_timeout_ms 5 minutes) waits through the
    two minutes, says where it waits, and resumes exactly when the brokers return;
    ``impatient`` (task_timeout_ms 15 s) fails its thread with TaskTimeoutError within the
    bound, closes in bounded time, and a new instance on its state directory loses nothing."""
    patient = counting_app(cluster, tmp_path / "patient", task_timeout_ms=300_000)
    impatient = counting_app(cluster, tmp_path / "impatient")
    expected, streams, seen = started_on_input(patient, producer_configs={"max_block_ms": CALL_BOUND_MS})
    expected_impatient, failing, failed_with = started_on_input(
        impatient, task_timeout_ms=TASK_TIMEOUT_MS,
        producer_configs={"max_block_ms": CALL_BOUND_MS, "bootstrap_timeout_ms": CALL_BOUND_MS})
    # the work in hand cannot commit: the transaction fails, the producer is replaced, which is
    # retried until the task timeout (each attempt at most its bounds)
    failure_bound = (TASK_TIMEOUT_MS + 4 * CALL_BOUND_MS) / 1000 + 30
    try:
        for app in (patient, impatient):
            wait_progressing(lambda a=app: a.committed_total() >= RECORDS // 4, app.committed_total,
                             f"a quarter of {app.app_id}'s input committed", measure="committed input offsets")
        _kill_all(cluster)
        down_at = time.monotonic()
        waited: set[str] = set()
        failed_after = None
        while time.monotonic() - down_at < OUTAGE_SECONDS:
            assert streams.state in (KafkaStreamsState.RUNNING, KafkaStreamsState.REBALANCING), \
                f"the instance left RUNNING while the brokers were down: {streams.state} {seen}"
            waited.update(f"{t.kafka_waits.current.call}" for t in streams.threads if t.kafka_waits.current)
            if failed_after is None and failing.state is KafkaStreamsState.ERROR:
                failed_after = time.monotonic() - down_at
            assert failed_after is not None or time.monotonic() - down_at < failure_bound, \
                f"the impatient thread did not fail past the task timeout within {failure_bound:.0f} s: " \
                f"state {failing.state}, waits {[t.kafka_waits.current for t in failing.threads]}"
            time.sleep(0.5)
        print(f"\nwhile the cluster was down the thread waited in: {sorted(waited)}; the impatient thread failed "
              f"{failed_after:.1f} s after the cluster went down (task_timeout_ms {TASK_TIMEOUT_MS})", file=sys.stderr)
        closing = time.monotonic()
        assert failing.close(timeout=30) and time.monotonic() - closing < 35
        _start_stopped(cluster)
        back_at = time.monotonic()
        committed_at_return = patient.committed_total()
        more = produce_numbered(cluster.bootstrap_servers, patient.input, RECORDS_AFTER_RETURN, KEYS,
                                start_ms=int(time.time() * 1000))
        expected = dict(Counter(expected) + Counter(more))
        wait_until(lambda: patient.committed_total() > committed_at_return, 60,
                   "processing to resume within 60 s of the brokers being back",
                   lambda: f"state {streams.state}, waits {[t.kafka_waits.current for t in streams.threads]}")
        print(f"processing resumed {time.monotonic() - back_at:.1f} s after the brokers were back", file=sys.stderr)
        # the clients' metadata still follows the cluster after the refreshes failed for two
        # minutes (kafka-python's refresh loop ended on a failed refresh: a moved leader was
        # fetched from forever, kafka/failed_metadata_refresh.py)
        states = cluster.partitions([patient.input])
        leader = states[(patient.input, 0)].leader
        cluster.move_leader(patient.input, 0, next(n for n in states[(patient.input, 0)].isr if n != leader))
        after_move = produce_numbered(cluster.bootstrap_servers, patient.input, RECORDS_AFTER_RETURN, KEYS,
                                      start_ms=int(time.time() * 1000))
        expected = dict(Counter(expected) + Counter(after_move))
        wait_progressing(lambda: patient.committed_total() >= RECORDS + 2 * RECORDS_AFTER_RETURN,
                         patient.committed_total,
                         "every record committed", measure="committed input offsets",
                         context=lambda: f"state {streams.state}")
        assert not seen, seen
    finally:
        assert streams.close(timeout=60)
        failing.close(timeout=30)
    assert waited, "the stream thread never showed a wait on Kafka while the whole cluster was down"
    assert_exact(patient.outputs_per_key(), patient.store_counts(), expected)

    assert len(failed_with) == 1 and isinstance(failed_with[0], TaskTimeoutError), failed_with
    assert f"task_timeout_ms={TASK_TIMEOUT_MS}" in str(failed_with[0]) and failed_with[0].call, failed_with[0]
    assert failed_after >= TASK_TIMEOUT_MS / 1000
    cluster.wait_healthy()
    impatient.run_to_end()  # a new instance on the same state directory finishes the input
    assert_exact(impatient.outputs_per_key(), impatient.store_counts(), expected_impatient)
