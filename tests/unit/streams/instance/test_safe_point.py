"""StreamThread.run_at_safe_point: actions wait out rebalances, report through their
future, and fail (never hang) when the thread stops first. No broker: the loop is not run."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.errors import StreamsError


class IdleConsumer:
    """No coordinator: ``group_rejoining`` reports no rebalance."""


@pytest.fixture(autouse=True)
def idle_consumer(thread):
    thread.consumer = IdleConsumer()


def test_actions_run_in_order_and_report_results_and_errors(thread):
    seen = []
    first = thread.run_at_safe_point(lambda t: seen.append(t) or "one")
    failing = thread.run_at_safe_point(lambda t: 1 / 0)
    last = thread.run_at_safe_point(lambda t: seen.append("last") or "two")
    thread._run_safe_point_actions()
    assert seen == [thread, "last"]
    assert first.result(0) == "one" and last.result(0) == "two"
    assert isinstance(failing.exception(0), ZeroDivisionError)


def test_actions_wait_while_commits_are_refused(thread):
    future = thread.run_at_safe_point(lambda t: "ran")
    thread.committer.blocked = True  # the group is rebalancing
    thread._run_safe_point_actions()
    assert not future.done()
    thread.committer.blocked = False
    thread._run_safe_point_actions()
    assert future.result(0) == "ran"


def test_a_stopping_thread_fails_pending_and_later_actions(thread):
    pending = thread.run_at_safe_point(lambda t: "never")
    thread._close(clean=False)
    assert isinstance(pending.exception(0), StreamsError)
    late = thread.run_at_safe_point(lambda t: "never")
    assert "has stopped" in str(late.exception(0))
