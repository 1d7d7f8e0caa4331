"""A stream thread that dies on an exception in user code under exactly-once commits
nothing of its open transaction: neither the failed task's writes nor any other task's.
Each case fails an instance, checks that what is committed is a consistent cut, restarts on
the same state directory without the fault (or with the handler that skips the record) and
checks every key's output exactly 1..n and the store (tests/integration/failure_oracle.py).
The handlers' other settings are exercised the same way: records too large for the
producer, and invalid timestamps under each timestamp extractor."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest

from airflow_stateful_provider.streams import (
    DeserializationError,
    InvalidTimestampError,
    KafkaStreamsState,
    ProcessingError,
    ProductionError,
)
from tests.integration.failure_oracle import (
    STUCK_THEN_FAILED,
    CountingApp,
    StuckThenFailed,
    assert_committed_state_consistent,
    assert_exact,
    produce_numbered,
)
from tools.kafka.topics import read_all
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

RECORDS = 5_000
KEYS = 100


@pytest.fixture
def app(bootstrap_servers, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    counting = CountingApp(bootstrap_servers, suffix, tmp_path, processing_guarantee="exactly_once_v2")
    counting.create_topics()
    return counting


def test_processor_exception_commits_nothing_of_the_open_transaction(app):
    expected = produce_numbered(app.bootstrap_servers, app.input, RECORDS, KEYS, start_ms=int(time.time() * 1000))
    _, seen = app.run_until_failed(app_configs={"fail_at": RECORDS // 2})
    assert len(seen) == 1 and isinstance(seen[0], ProcessingError), seen
    assert f"record {RECORDS // 2}" in str(seen[0])
    assert_committed_state_consistent(app)

    app.run_to_end()
    assert_exact(app.outputs_per_key(), app.store_counts(), expected)


def test_punctuator_exception_commits_nothing_of_the_open_transaction(app):
    start = int(time.time() * 1000)
    expected = produce_numbered(app.bootstrap_servers, app.input, RECORDS, KEYS, start_ms=start)
    _, seen = app.run_until_failed(app_configs={"punctuate_fail_at": start + RECORDS // 2})
    assert len(seen) == 1 and isinstance(seen[0], ProcessingError) and "punctuat" in str(seen[0]), seen
    assert_committed_state_consistent(app)

    app.run_to_end(app_configs={"punctuate_fail_at": start + 10 * RECORDS})
    assert_exact(app.outputs_per_key(), app.store_counts(), expected)


def test_poison_record_with_log_and_fail_commits_nothing_then_log_and_continue_skips_it(app):
    start = int(time.time() * 1000)
    expected = produce_numbered(app.bootstrap_servers, app.input, RECORDS, KEYS, start_ms=start,
                                extra=[("k007", b"{not json", start + RECORDS // 2)])
    _, seen = app.run_until_failed()
    assert len(seen) == 1 and isinstance(seen[0], DeserializationError), seen
    assert_committed_state_consistent(app, skipped={"k007"})

    metrics = app.run_to_end(deserialization_exception_handler="log_and_continue")
    assert metrics["dropped-records-total:deserialization"] == 1
    assert_exact(app.outputs_per_key(), app.store_counts(), expected)


def large_input_app(bootstrap_servers: str, tmp_path, guarantee: str) -> CountingApp:
    counting = CountingApp(bootstrap_servers, uuid.uuid4().hex[:8], tmp_path, processing_guarantee=guarantee)
    counting.create_topics(**{"max.message.bytes": str(8 << 20)})
    return counting


def produce_with_big_record(app: CountingApp) -> Counter:
    """The numbered records and, among them, a valid 5 MB record of k007 whose echo is larger
    than the producer's 1 MB limit; returns the counts expected with it counted."""
    start = int(time.time() * 1000)
    big = json.dumps({"n": -1, "blob": "x" * (5 << 20)}).encode()
    expected = Counter(produce_numbered(app.bootstrap_servers, app.input, RECORDS, KEYS, start_ms=start,
                                        extra=[("k007", big, start + RECORDS // 2)]))
    expected["k007"] += 1
    return expected


def test_a_record_too_large_for_the_producer_fails_then_is_skipped_with_log_and_continue(bootstrap_servers,
                                                                                        tmp_path):
    """Exactly-once: the default handler fails the thread (nothing of the open transaction
    committed), and ``log_and_continue`` skips only the echo; the count of that record goes
    through."""
    app = large_input_app(bootstrap_servers, tmp_path, "exactly_once_v2")
    expected = produce_with_big_record(app)
    _, seen = app.run_until_failed()
    assert len(seen) == 1 and isinstance(seen[0], ProductionError), seen
    assert repr(app.echo) in str(seen[0]) and "larger than the maximum request size" in str(seen[0])
    assert_committed_state_consistent(app)

    metrics = app.run_to_end(production_exception_handler="log_and_continue")
    assert metrics["dropped-records-total:production"] == 1
    assert app.echoed() == []
    assert_exact(app.outputs_per_key(), app.store_counts(), dict(expected))


def test_a_record_too_large_for_the_producer_at_least_once(bootstrap_servers, tmp_path):
    """At-least-once: the default handler fails the thread naming the topic; with
    ``log_and_continue`` from the start every count is exact and only the echo is skipped
    (a failed at-least-once run may count records twice, so the two runs use two apps)."""
    failing = large_input_app(bootstrap_servers, tmp_path / "fail", "at_least_once")
    produce_with_big_record(failing)
    _, seen = failing.run_until_failed()
    assert len(seen) == 1 and isinstance(seen[0], ProductionError) and repr(failing.echo) in str(seen[0]), seen

    app = large_input_app(bootstrap_servers, tmp_path / "continue", "at_least_once")
    expected = produce_with_big_record(app)
    metrics = app.run_to_end(production_exception_handler="log_and_continue")
    assert metrics["dropped-records-total:production"] == 1
    assert app.echoed() == []
    assert_exact(app.outputs_per_key(), app.store_counts(), dict(expected))


def test_invalid_timestamps_fail_by_default_then_are_skipped_with_log_and_skip(app):
    start = int(time.time() * 1000)
    bad = [("k007", json.dumps({"n": -1}).encode(), -1), ("k011", json.dumps({"n": -5}).encode(), -5)]
    expected = produce_numbered(app.bootstrap_servers, app.input, RECORDS, KEYS, start_ms=start, extra=bad)
    _, seen = app.run_until_failed()
    assert len(seen) == 1 and isinstance(seen[0], InvalidTimestampError), seen
    assert "has invalid timestamp -" in str(seen[0]) and "log_and_skip_on_invalid_timestamp" in str(seen[0])
    assert_committed_state_consistent(app, skipped={"k007", "k011"})

    metrics = app.run_to_end(default_timestamp_extractor="log_and_skip_on_invalid_timestamp")
    assert metrics["dropped-records-total:invalid-timestamp"] == 2
    assert_exact(app.outputs_per_key(), app.store_counts(), expected)


def test_invalid_timestamps_take_the_partition_time_with_use_partition_time(app):
    start = int(time.time() * 1000)
    bad = [("k007", json.dumps({"n": -1}).encode(), -1), ("k011", json.dumps({"n": -5}).encode(), -5)]
    expected = Counter(produce_numbered(app.bootstrap_servers, app.input, RECORDS, KEYS, start_ms=start, extra=bad))
    expected.update({"k007": 1, "k011": 1})
    metrics = app.run_to_end(default_timestamp_extractor="use_partition_time_on_invalid_timestamp")
    assert metrics.get("dropped-records-total", 0) == 0
    assert_exact(app.outputs_per_key(), app.store_counts(), dict(expected))


def test_processing_dead_letter_skips_the_failed_record_and_keeps_it(app):
    """``processing_exception_handler="dead_letter:<topic>"``: the failing record goes to the
    dead-letter topic (created at start) with the error in its headers; every other record
    is counted exactly."""
    start = int(time.time() * 1000)
    expected = Counter(produce_numbered(app.bootstrap_servers, app.input, RECORDS, KEYS, start_ms=start))
    failing_key = f"k{(RECORDS // 2) % KEYS:03d}"
    expected[failing_key] -= 1
    dead_letters = f"{app.app_id}-dlq"
    metrics = app.run_to_end(app_configs={"fail_at": RECORDS // 2},
                             processing_exception_handler=f"dead_letter:{dead_letters}")
    assert metrics["dropped-records-total:processing"] == 1
    assert_exact(app.outputs_per_key(), app.store_counts(), dict(expected))
    (dead,) = read_all(app.bootstrap_servers, dead_letters)
    assert (dead.key.decode(), json.loads(dead.value)) == (failing_key, {"n": RECORDS // 2})
    headers = dict(dead.headers)
    assert b"user code failed on record" in headers["__streams.errors.message"]
    assert headers["__streams.errors.topic"].decode() == app.input


def test_a_thread_stuck_in_user_code_does_not_hold_the_error_shutdown(app, caplog):
    """One stream thread blocks forever in a processor, the other one fails: the error
    shutdown waits task_timeout_ms for the stuck thread, names it and where it is, and the
    instance reaches ERROR with the thread still blocked (before, it stayed in PENDING_ERROR
    for as long as the user code blocked). What was committed stays a consistent cut, and
    once the user code returns, a restart counts every record exactly once.

    The input goes in once the instance runs, both threads with their tasks: a thread
    blocked while the other one has not yet joined the group would hold the rebalance up for
    max.poll.interval.ms, and nothing would fail."""
    stuck = STUCK_THEN_FAILED[app.app_id] = StuckThenFailed()
    caplog.set_level("WARNING", logger="airflow_stateful_provider")
    streams = app.streams(num_stream_threads=2, task_timeout_ms=2_000, app_configs={"block_one_fail_other": True})
    seen: list[BaseException] = []
    streams.set_uncaught_exception_handler(seen.append)
    streams.start()
    try:
        streams.wait_for_state(KafkaStreamsState.RUNNING, timeout=120)
        expected = produce_numbered(app.bootstrap_servers, app.input, RECORDS, KEYS,
                                    start_ms=int(time.time() * 1000))
        wait_until(lambda: streams.state is KafkaStreamsState.ERROR, 120, "the instance to reach ERROR",
                   lambda: f"state {streams.state}, blocked {stuck.blocked}")
        assert stuck.blocked is not None and stuck.blocked.is_alive(), "the stuck thread ended"
        assert len(seen) == 1 and isinstance(seen[0], ProcessingError), seen
        gave_up = [r.getMessage() for r in caplog.records if "did not stop within task_timeout_ms" in r.getMessage()]
        assert len(gave_up) == 1, [r.getMessage() for r in caplog.records]
        assert f"{stuck.blocked.name} (in " in gave_up[0] and "in process" in gave_up[0], gave_up
        assert not streams.close(timeout=1), "close() said nothing runs while the stuck thread runs"
        assert_committed_state_consistent(app)
    finally:
        stuck.release.set()
    assert streams.close(timeout=60), "the released thread did not stop"
    assert streams.state is KafkaStreamsState.ERROR

    app.run_to_end()
    assert_exact(app.outputs_per_key(), app.store_counts(), expected)
