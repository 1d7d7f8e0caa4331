"""Lag computation (docs/semantics.md §3) beyond the literal examples in test_semantics_scenarios.py."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.assignment.lag import (
    LATEST_OFFSET,
    UNKNOWN_OFFSET_SUM,
    compute_lag,
    compute_task_lags,
    is_caught_up,
)
from airflow_stateful_provider.streams.task_id import TaskId


def test_unknown_offset_sum_counts_as_no_state() -> None:
    """docs/semantics.md §3: UNKNOWN -> endSum. Kafka Streams differs in form only: its ClientState keeps
    -3 as the lag, but it reports -3 solely for standbys of pre-KIP-441 (version < 7)
    subscriptions, which our versioned codec never produces; a -3 lag there is "not caught up"
    yet sorts as most caught up, an artifact we do not reproduce."""
    assert compute_lag(UNKNOWN_OFFSET_SUM, 100) == 100


def test_reported_equal_to_end_sum_is_zero_lag() -> None:
    assert compute_lag(100, 100) == 0
    assert compute_lag(0, 0) == 0


def test_latest_stays_latest_even_with_empty_changelog() -> None:
    assert compute_lag(LATEST_OFFSET, 0) == LATEST_OFFSET


@pytest.mark.parametrize(
    ("reported", "end", "message"),
    [
        (-1, 100, "reported_offset_sum must be >= 0, -2 (latest) or -3 (unknown), got -1"),
        (5, -1, "end_offset_sum must be >= 0, got -1"),
        ("5", 100, "reported_offset_sum must be an int, got str '5'"),
        (5, 1.5, "end_offset_sum must be an int, got float 1.5"),
        (True, 100, "reported_offset_sum must be an int, got bool True"),
    ],
)
def test_bad_offset_sums_are_refused(reported: object, end: object, message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        compute_lag(reported, end)  # type: ignore[arg-type]
    assert str(excinfo.value) == message


def test_task_lags_cover_every_stateful_task_and_ignore_unknown_reports() -> None:
    """Kafka Streams' computeTaskLags: one lag per task with an end sum; a task the client did
    not report gets the end sum; reports of tasks that are not stateful are dropped."""
    a, b, c, gone = TaskId(0, 0), TaskId(0, 1), TaskId(1, 0), TaskId(9, 9)
    lags = compute_task_lags(
        {a: LATEST_OFFSET, b: 40, gone: 7},
        {a: 100, b: 50, c: 30},
    )
    assert lags == {a: LATEST_OFFSET, b: 10, c: 30}


@pytest.mark.parametrize(
    ("lag", "expected"),
    [(LATEST_OFFSET, True), (0, True), (100, True), (101, False), (2**63 - 1, False)],
)
def test_caught_up_means_latest_or_within_acceptable_lag(lag: int, expected: bool) -> None:
    assert is_caught_up(lag, 100) is expected


def test_unbounded_acceptable_lag_makes_everyone_caught_up() -> None:
    """Kafka Streams treats acceptable.recovery.lag = Long.MAX_VALUE as "always caught up"
    (no warmups at all); the same falls out of the comparison here."""
    assert is_caught_up(2**63 - 1, 2**63 - 1)
