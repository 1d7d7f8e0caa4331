"""KafkaWaits: what a thread waits in, and the task timeout of its retries."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.errors import TaskTimeoutError
from airflow_stateful_provider.streams.processing.kafka_waits import KafkaWait, KafkaWaits


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_call_a_thread_waits_in_is_shown_while_it_waits_and_updated():
    clock = Clock()
    waits = KafkaWaits(60_000, clock=clock)
    assert waits.current is None
    with waits.waiting_in("commit_transaction", "the transaction coordinator") as update:
        assert waits.current == KafkaWait("commit_transaction", "the transaction coordinator", 1_000_000)
        clock.now += 5
        update("the transaction coordinator, broker 2")
        assert waits.current == KafkaWait("commit_transaction", "the transaction coordinator, broker 2", 1_000_000)
    assert waits.current is None


def test_failures_past_the_task_timeout_fail_with_the_call_and_the_last_error():
    clock = Clock()
    waits = KafkaWaits(10_000, clock=clock)
    waits.failed("init_transactions", OSError("first"))
    clock.now += 9.9
    waits.failed("init_transactions", OSError("again"))
    assert waits.failing_since_ms == 1_000_000
    clock.now += 0.1
    with pytest.raises(TaskTimeoutError, match=r"init_transactions kept failing for 10 s, past "
                                               r"task_timeout_ms=10000 .*: last") as raised:
        waits.failed("init_transactions", OSError("last"))
    assert raised.value.call == "init_transactions"


def test_a_success_starts_the_task_timeout_again():
    clock = Clock()
    waits = KafkaWaits(10_000, clock=clock)
    waits.failed("commit", OSError("down"))
    clock.now += 9
    waits.succeeded()
    assert waits.failing_since_ms is None
    clock.now += 9
    waits.failed("commit", OSError("down again"))
    clock.now += 9
    waits.failed("commit", OSError("still down"))  # 9 s since the new first failure


def test_retried_calls_again_while_the_brokers_cannot_answer_and_shows_the_wait():
    from kafka.errors import KafkaTimeoutError

    waits = KafkaWaits(60_000)
    seen = []
    answers = [KafkaTimeoutError("Failed to get offsets by timestamps in 30000 ms"), {"tp": 7}]

    def end_offsets(partitions):
        seen.append(waits.current)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert waits.retried("end_offsets", "the changelogs' partition leaders", end_offsets, ["tp"]) == {"tp": 7}
    assert [w.call for w in seen] == ["end_offsets", "end_offsets"]
    assert waits.current is None and waits.failing_since_ms is None  # a success clears the failures


def test_retried_raises_at_once_what_retrying_cannot_mend():
    from kafka.errors import TopicAuthorizationFailedError, UnknownTopicOrPartitionError

    waits = KafkaWaits(60_000)
    for error in (TopicAuthorizationFailedError("no"), UnknownTopicOrPartitionError("deleted")):
        calls = []

        def failing(error=error, calls=calls):
            calls.append(1)
            raise error

        with pytest.raises(type(error)):
            waits.retried("committed", "the group coordinator", failing)
        assert len(calls) == 1


def test_retried_stops_when_the_thread_is_asked_to_stop():
    import threading

    from kafka.errors import KafkaConnectionError

    stop = threading.Event()
    waits = KafkaWaits(600_000, interrupted=stop)
    calls = []

    def down():
        calls.append(1)
        if len(calls) == 2:
            stop.set()
        raise KafkaConnectionError("111 ECONNREFUSED")

    with pytest.raises(KafkaConnectionError):
        waits.retried("committed", "the group coordinator", down)
    assert len(calls) == 2


def test_a_wait_across_the_loop_keeps_its_start_shows_under_a_calls_wait_and_ends_when_cleared():
    clock = Clock()
    waits = KafkaWaits(10_000, clock=clock)
    waits.still_waiting("poll", None)
    assert waits.current is None
    waits.still_waiting("poll", "the group coordinator")
    clock.now += 20  # polls go on finding no coordinator: the wait keeps its start
    waits.still_waiting("poll", "the group coordinator")
    assert waits.current == KafkaWait("poll", "the group coordinator", 1_000_000)
    with waits.waiting_in("commit_transaction", "the transaction coordinator"):
        assert waits.current.call == "commit_transaction"  # a call in progress is what the thread waits in
    assert waits.current == KafkaWait("poll", "the group coordinator", 1_000_000)
    waits.still_waiting("poll", None)
    assert waits.current is None
