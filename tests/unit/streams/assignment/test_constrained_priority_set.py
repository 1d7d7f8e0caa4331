"""ConstrainedPrioritySet: least weight first, ties by id, constraints skip without removing."""

from __future__ import annotations

from airflow_stateful_provider.streams.assignment.constrained_priority_set import (
    ConstrainedPrioritySet,
)


def test_polls_lightest_valid_client_and_keeps_invalid_ones() -> None:
    load = {"a": 2.0, "b": 1.0, "c": 1.0}
    holds = {"b": {"t"}}
    queue: ConstrainedPrioritySet[str, str] = ConstrainedPrioritySet(
        lambda client, task: task not in holds.get(client, set()), load.__getitem__
    )
    queue.offer_all(["a", "b", "c"])
    assert queue.poll("t") == "c"  # b is lighter-or-equal but holds t; c beats a on load
    assert "b" in queue and "c" not in queue
    assert queue.poll("u") == "b"  # ties broken by id, and b may take u
    assert queue.poll("t", lambda client: client != "a") is None
    assert len(queue) == 1


def test_reoffering_sees_the_new_weight() -> None:
    load = {"a": 0.0, "b": 1.0}
    queue: ConstrainedPrioritySet[str, str] = ConstrainedPrioritySet(lambda c, t: True, load.__getitem__)
    queue.offer_all(["a", "b", "a"])
    assert len(queue) == 2
    load["a"] = 5.0
    queue.offer("a")
    assert queue.poll("t") == "b"
