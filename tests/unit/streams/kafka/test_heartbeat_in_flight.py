"""A consumer's poll waits while its heartbeat is in flight (kafka/heartbeat_in_flight.py). On
kafka-python's own ``Heartbeat`` and its coordinators' ``time_to_next_poll`` and
``time_to_next_heartbeat``, bound to a coordinator without a network. No broker:
tests/integration/test_frozen_broker.py counts a consumer's poll rounds on a frozen one."""

from __future__ import annotations

import threading
import time
import types

import pytest
from kafka.coordinator.base import BaseCoordinator
from kafka.coordinator.consumer import ConsumerCoordinator
from kafka.coordinator.heartbeat import Heartbeat
from kafka.structs import MemberState

from airflow_stateful_provider.streams.kafka.heartbeat_in_flight import (
    heartbeat_in_flight,
    poll_waits_while_heartbeat_in_flight,
)

INTERVAL_MS = 300


def coordinator(*, auto_commit_in_s: float | None = None, state: str = MemberState.STABLE) -> types.SimpleNamespace:
    """A joined member's coordinator: kafka-python's answers, its state set by hand."""
    stub = types.SimpleNamespace(
        config={"enable_auto_commit": auto_commit_in_s is not None},
        next_auto_commit_deadline=None if auto_commit_in_s is None else time.monotonic() + auto_commit_in_s,
        heartbeat=Heartbeat(group_id="g", heartbeat_interval_ms=INTERVAL_MS, session_timeout_ms=6000),
        state=state, _lock=threading.RLock())
    stub.time_to_next_heartbeat = BaseCoordinator.time_to_next_heartbeat.__get__(stub)
    stub.time_to_next_poll = ConsumerCoordinator.time_to_next_poll.__get__(stub)
    return stub


def consumer_of(stub: types.SimpleNamespace) -> types.SimpleNamespace:
    return types.SimpleNamespace(_coordinator=stub)


def sent_a_second_ago(stub: types.SimpleNamespace) -> types.SimpleNamespace:
    """The last heartbeat sent a second ago, the member's timeouts reset before it (its join)."""
    stub.heartbeat.sent_heartbeat()
    stub.heartbeat.last_send -= 1.0
    stub.heartbeat.last_reset = stub.heartbeat.last_send - 1.0
    return stub


def test_stock_kafka_python_polls_for_0_ms_while_a_heartbeat_waits_past_the_interval():
    """What the door works around: were this above 0, the fix would be dead code."""
    assert sent_a_second_ago(coordinator()).time_to_next_poll() == 0


def test_the_heartbeat_interval_while_a_heartbeat_waits_past_it():
    stub = sent_a_second_ago(coordinator())
    poll_waits_while_heartbeat_in_flight(consumer_of(stub))
    assert heartbeat_in_flight(stub.heartbeat)
    assert stub.time_to_next_poll() == INTERVAL_MS / 1000


@pytest.mark.parametrize("outcome", ["received_heartbeat", "fail_heartbeat"])
def test_a_heartbeat_due_after_an_answer_or_a_failure_is_due_as_before(outcome):
    stub = sent_a_second_ago(coordinator())
    getattr(stub.heartbeat, outcome)()
    poll_waits_while_heartbeat_in_flight(consumer_of(stub))
    assert not heartbeat_in_flight(stub.heartbeat)
    assert stub.time_to_next_poll() == 0


def test_before_the_interval_the_time_left_as_before():
    stub = coordinator()
    stub.heartbeat.sent_heartbeat()
    poll_waits_while_heartbeat_in_flight(consumer_of(stub))
    assert 0.2 < stub.time_to_next_poll() <= INTERVAL_MS / 1000


def test_no_heartbeat_sent_yet_is_not_in_flight():
    stub = coordinator()
    assert stub.heartbeat.heartbeat_failed is None
    assert not heartbeat_in_flight(stub.heartbeat)


def test_an_auto_commit_due_still_ends_the_wait():
    due = sent_a_second_ago(coordinator(auto_commit_in_s=-0.5))
    soon = sent_a_second_ago(coordinator(auto_commit_in_s=0.1))
    for stub in (due, soon):
        poll_waits_while_heartbeat_in_flight(consumer_of(stub))
    assert due.time_to_next_poll() == 0
    assert 0 < soon.time_to_next_poll() <= 0.1


def test_a_member_outside_its_group_waits_as_before():
    stub = sent_a_second_ago(coordinator(state=MemberState.UNJOINED))
    poll_waits_while_heartbeat_in_flight(consumer_of(stub))
    assert stub.time_to_next_poll() == float("inf")


def test_installed_once_and_a_consumer_without_a_group_is_left_alone():
    stub = sent_a_second_ago(coordinator())
    poll_waits_while_heartbeat_in_flight(consumer_of(stub))
    installed = stub.time_to_next_poll
    poll_waits_while_heartbeat_in_flight(consumer_of(stub))
    assert stub.time_to_next_poll is installed
    poll_waits_while_heartbeat_in_flight(types.SimpleNamespace(_coordinator=None))  # no error
