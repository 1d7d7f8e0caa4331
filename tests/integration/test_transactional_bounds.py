"""Every transactional call the engine makes waits at most its bound when the broker stops
answering (SIGSTOP: connections stay open, nothing is answered), and works again once it
answers; so does the look-up start() makes of its control topic's authorized operations.

kafka-python 3.0.12 waits without a bound on send_offsets_to_transaction, commit_transaction
and abort_transaction; the engine calls them through kafka/transactional_calls.py with the
producer's max_block_ms as the bound, and retries a producer that cannot be started until
task_timeout_ms (processing/kafka_waits.py). Each test freezes a broker of its own (not the
session's) for the length of one call and measures how long the call took.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError
from kafka.structs import OffsetAndMetadata

from airflow_stateful_provider.streams import BrokerUnreachableError, StreamsConfig
from airflow_stateful_provider.streams.errors import TaskTimeoutError, TransactionFailedError
from airflow_stateful_provider.streams.instance.preflight import open_admin
from airflow_stateful_provider.streams.kafka.transactional_calls import (
    TransactionalCallTimeout,
    abort_transaction_within,
    commit_transaction_within,
    prepare_transactional_producer,
    send_offsets_to_transaction_within,
)
from airflow_stateful_provider.streams.processing.kafka_waits import KafkaWaits
from airflow_stateful_provider.streams.processing.streams_producer import StreamsProducer
from airflow_stateful_provider.streams.topics.topic_manager import authorized_operations
from tests.integration.group_member import joined_consumer
from tools.kafka.broker import LocalKafkaBroker
from tools.kafka.topics import create_topics, produce, read_all
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

#: The bound given to each call (the producer's max_block_ms).
BOUND_MS = 3_000
#: kafka-python's own request timeout, below the bound: a request that times out is sent again
#: (kafka-python made the transaction state fatal), and the bound ends the wait.
REQUEST_TIMEOUT_MS = BOUND_MS // 3
#: What a bounded call may take beyond its bound: waking up, closing, a loaded machine.
SLACK_S = 5.0


@pytest.fixture(scope="module")
def broker() -> Iterator[LocalKafkaBroker]:
    """A broker of this module only: the tests freeze it."""
    broker = LocalKafkaBroker(work_dir=Path(tempfile.mkdtemp(prefix="kafka-frozen-")))
    broker.start()
    try:
        yield broker
    finally:
        os.kill(broker.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        broker.stop()


class Frozen:
    """The broker stops answering (SIGSTOP) for the block, and answers again after it."""

    def __init__(self, broker: LocalKafkaBroker) -> None:
        assert broker.process is not None
        self.pid = broker.process.pid

    def __enter__(self) -> Frozen:
        os.kill(self.pid, signal.SIGSTOP)
        return self

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def timed(call) -> tuple[float, BaseException | None, object]:
    started = time.monotonic()
    try:
        result = call()
    except BaseException as exc:  # noqa: BLE001 - the test looks at what was raised
        return time.monotonic() - started, exc, None
    return time.monotonic() - started, None, result


def new_producer(broker: LocalKafkaBroker, **configs) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id=f"tx-{uuid.uuid4().hex[:8]}",
                             max_block_ms=BOUND_MS, request_timeout_ms=REQUEST_TIMEOUT_MS,
                             bootstrap_timeout_ms=BOUND_MS, **configs)
    prepare_transactional_producer(producer)  # as the engine's producers
    producer.init_transactions()
    return producer


@pytest.fixture
def topic(broker) -> str:
    name = f"bounds-{uuid.uuid4().hex[:8]}"
    create_topics(broker.bootstrap_servers, {name: 1})
    produce(broker.bootstrap_servers, name, [(b"k", b"v")])
    return name


@pytest.fixture
def group_member(broker, topic) -> Iterator[KafkaConsumer]:
    """A consumer of ``topic`` in a group, joined: its group metadata goes with the offsets."""
    with joined_consumer(broker.bootstrap_servers, topic) as consumer:
        yield consumer


def in_transaction(producer: KafkaProducer, topic: str) -> None:
    producer.begin_transaction()
    producer.send(topic, key=b"k", value=b"in-transaction")
    producer.flush(timeout=30)


def report(call: str, took: float) -> None:
    print(f"\n{call}: {took:.1f} s with the broker frozen (bound {BOUND_MS / 1000:g} s)", file=sys.stderr)


def test_send_offsets_to_transaction_waits_at_most_its_bound(broker, topic, group_member):
    producer = new_producer(broker)
    try:
        in_transaction(producer, topic)
        offsets = {TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)}
        with Frozen(broker):
            took, error, _ = timed(lambda: send_offsets_to_transaction_within(
                producer, offsets, group_member.group_metadata(), BOUND_MS))
        report("send_offsets_to_transaction", took)
        assert isinstance(error, TransactionalCallTimeout), error
        assert "group coordinator" in str(error) and f"{BOUND_MS} ms" in str(error)
        assert BOUND_MS / 1000 <= took < BOUND_MS / 1000 + SLACK_S
    finally:
        producer.close(timeout=5)


def test_commit_transaction_waits_at_most_its_bound(broker, topic):
    producer = new_producer(broker)
    try:
        in_transaction(producer, topic)
        with Frozen(broker):
            took, error, _ = timed(lambda: commit_transaction_within(producer, BOUND_MS))
        report("commit_transaction", took)
        assert isinstance(error, TransactionalCallTimeout), error
        assert "transaction coordinator" in str(error)
        assert BOUND_MS / 1000 <= took < BOUND_MS / 1000 + SLACK_S
    finally:
        producer.close(timeout=5)


def test_abort_transaction_waits_at_most_its_bound(broker, topic):
    producer = new_producer(broker)
    try:
        in_transaction(producer, topic)
        with Frozen(broker):
            took, error, aborted = timed(lambda: abort_transaction_within(producer, BOUND_MS))
        report("abort_transaction", took)
        assert error is None and aborted is False
        assert BOUND_MS / 1000 <= took < BOUND_MS / 1000 + SLACK_S
    finally:
        producer.close(timeout=5)


def test_init_transactions_waits_at_most_max_block_ms_and_a_request_timeout_is_retried(broker):
    """kafka-python bounds init_transactions by max_block_ms; a request that times out within it
    is sent again (prepare_transactional_producer), so the call ends in the retriable
    KafkaTimeoutError the engine retries, not in a fatal transaction state."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id=f"tx-{uuid.uuid4().hex[:8]}",
                             max_block_ms=BOUND_MS, request_timeout_ms=REQUEST_TIMEOUT_MS)
    prepare_transactional_producer(producer)  # as the engine's producers
    try:
        with Frozen(broker):
            took, error, _ = timed(producer.init_transactions)
        report("init_transactions", took)
        assert isinstance(error, KafkaTimeoutError) and error.retriable, error
        assert took < BOUND_MS / 1000 + SLACK_S
    finally:
        producer.close(timeout=5)


def test_a_failed_commit_is_never_committed_and_the_producer_goes_on_after_the_broker_returns(broker, topic,
                                                                                           group_member):
    """The engine's own producer: a commit that cannot complete is aborted (the producer is
    replaced, which fences the old one); its record never reaches a read_committed reader,
    and the next transaction commits once the broker answers again."""
    sink = f"sink-{uuid.uuid4().hex[:8]}"
    create_topics(broker.bootstrap_servers, {sink: 1})

    def factory(**overrides):
        return KafkaProducer(bootstrap_servers=broker.bootstrap_servers, max_block_ms=BOUND_MS,
                             request_timeout_ms=BOUND_MS, bootstrap_timeout_ms=BOUND_MS, transaction_timeout_ms=5_000,
                             **overrides)

    producer = StreamsProducer(factory, client_id="bounds", transactional_id=f"tx-{uuid.uuid4().hex[:8]}",
                               waits=KafkaWaits(120_000))
    offsets = {TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)}
    group_metadata = group_member.group_metadata()
    outcome: list[tuple[float, BaseException | None, object]] = []
    try:
        producer.send(sink, key=b"k", value=b"lost")
        producer.flush()
        committing = threading.Thread(target=lambda: outcome.append(
            timed(lambda: producer.commit_transaction(offsets, group_metadata))))
        with Frozen(broker):
            committing.start()
            # send offsets times out, the abort too, and the replacement producer is retried
            # (the thread shows what it waits in): the broker answers again from then on
            wait_until(lambda: producer.waits.current is not None and producer.waits.current.call == "init_transactions"
                       or bool(outcome), 60, "the replacement producer to be retried")
        committing.join(60)
        assert outcome, "the commit did not return within 60 s of the broker answering again"
        took, error, _ = outcome[0]
        report("StreamsProducer.commit_transaction (send offsets, abort, replace, broker back)", took)
        assert isinstance(error, TransactionFailedError), error
        producer.send(sink, key=b"k", value=b"committed")
        producer.commit_transaction(offsets, group_metadata)
        values = [record.value for record in read_all(broker.bootstrap_servers, sink)]
        assert values == [b"committed"]
    finally:
        producer.close(timeout=5)


def test_a_producer_that_cannot_start_fails_the_thread_after_the_task_timeout(broker):
    def factory(**overrides):
        return KafkaProducer(bootstrap_servers=broker.bootstrap_servers, max_block_ms=BOUND_MS,
                             request_timeout_ms=REQUEST_TIMEOUT_MS, bootstrap_timeout_ms=BOUND_MS, **overrides)

    with Frozen(broker):
        took, error, _ = timed(lambda: StreamsProducer(factory, client_id="bounds",
                                                       transactional_id=f"tx-{uuid.uuid4().hex[:8]}",
                                                       waits=KafkaWaits(5_000)))
    report("a transactional producer's start, task_timeout_ms 5 s", took)
    assert isinstance(error, TaskTimeoutError), error
    assert error.call.startswith("init_transactions") and "task_timeout_ms=5000" in str(error)
    assert 5 <= took < 5 + 2 * BOUND_MS / 1000 + SLACK_S


#: start()'s admin in the test below: its bound (bootstrap_timeout_ms), its requests' timeout,
#: and the longest one attempt may take (kafka-python's fixed connection set-up timeout).
ADMIN_BOUND_MS = 3_000
ADMIN_REQUEST_TIMEOUT_MS = 1_000
ADMIN_ATTEMPT_MS = 10_000


def test_the_control_topic_permission_lookup_waits_at_most_the_admin_bound(broker, tmp_path):
    """kafka_streams._control_topic_readable's describe, through start()'s admin client: its
    bound is the RetryingAdmin's (bootstrap_timeout_ms: no attempt starts after it) plus the
    one attempt still running then, which kafka-python ends after request_timeout_ms, or after
    its connection set-up timeout when it reconnects (a frozen broker accepts the connection
    and never answers its ApiVersions): 10 s, which kafka-python 3.0.12's admin client does not
    let one set (socket_connection_setup_timeout_ms is not among its settings)."""
    app = f"bounds-{uuid.uuid4().hex[:8]}"
    control = f"{app}-control"
    create_topics(broker.bootstrap_servers, {control: 1})
    config = StreamsConfig.from_mapping({
        "application_id": app, "bootstrap_servers": broker.bootstrap_servers, "state_dir": str(tmp_path),
        "admin_configs": {"bootstrap_timeout_ms": ADMIN_BOUND_MS}})
    admin = open_admin(config, lambda: KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers,
                                                        request_timeout_ms=ADMIN_REQUEST_TIMEOUT_MS))
    try:
        # no authorizer: every operation; a topic just created may not be described yet by a
        # loaded broker (None: an answer without the topic), so until it is, within a bound
        wait_until(lambda: "READ" in (authorized_operations(admin, control) or set()), 60,
                   f"the brokers to describe {control} with its authorized operations")
        with Frozen(broker):
            started = time.monotonic()
            with pytest.raises(BrokerUnreachableError, match=r"answered the admin call describe_topics within 3000 ms"):
                authorized_operations(admin, control)
            waited = time.monotonic() - started
        assert waited < (ADMIN_BOUND_MS + ADMIN_ATTEMPT_MS) / 1000 + SLACK_S, f"waited {waited:.1f} s"
        assert "READ" in (authorized_operations(admin, control) or set())  # answered again once thawed
    finally:
        admin.close()
