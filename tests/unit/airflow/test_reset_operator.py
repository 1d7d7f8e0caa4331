"""ResetApplicationOperator without a broker: arguments (seconds for durations, templates),
what reaches reset_application, the plan on XCom, and a refusal failing the task."""

from __future__ import annotations

import json
from datetime import timedelta
from unittest import mock

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_stateful_provider.operators.reset import ResetApplicationOperator
from airflow_stateful_provider.streams.reset.plan import OffsetChange, OffsetTarget, ResetPlan

RESET = "airflow_stateful_provider.streams.reset.application_reset.reset_application"


@pytest.fixture(autouse=True)
def connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT",
                       json.dumps({"conn_type": "stateful_streams", "host": "b1:9092,b2:9092"}))


def plan(*, refusals=(), executed=True) -> ResetPlan:
    return ResetPlan("clicks", OffsetTarget(None, "the earliest offset"), (OffsetChange("in", 0, 40, 0),),
                     ("clicks-counts-changelog", "clicks-status"), (), tuple(refusals), (), executed)


def test_durations_are_seconds_and_reach_the_reset_in_ms():
    operator = ResetApplicationOperator(task_id="reset", application_id="clicks", by_duration=3600, timeout=90,
                                        stale_after=45, input_topics="in, other", state_dir="/data/state")
    with mock.patch(RESET, return_value=plan()) as reset:
        result = operator.execute({})
    args, kwargs = reset.call_args
    assert args == (["b1:9092", "b2:9092"], "clicks")
    assert kwargs["by_duration"] == timedelta(hours=1) and kwargs["to_datetime"] is None
    assert (kwargs["timeout_ms"], kwargs["stale_after_ms"]) == (90_000, 45_000)
    assert kwargs["input_topics"] == ["in", "other"] and kwargs["state_dir"] == "/data/state"
    assert kwargs["execute"] is True
    assert result["executed"] is True and result["offsets"] == [
        {"topic": "in", "partition": 0, "current": 40, "target": 0}]


@pytest.mark.parametrize(("given", "expected"), [("PT30M", timedelta(minutes=30)), ("7200", timedelta(hours=2)),
                                                 (timedelta(days=1), timedelta(days=1)), (None, None)])
def test_by_duration_forms(given, expected):
    operator = ResetApplicationOperator(task_id="reset", application_id="clicks", by_duration=given, dry_run=True)
    with mock.patch(RESET, return_value=plan(executed=False)) as reset:
        operator.execute({})
    assert reset.call_args.kwargs["by_duration"] == expected and reset.call_args.kwargs["execute"] is False


def test_a_refused_reset_fails_the_task_naming_why():
    operator = ResetApplicationOperator(task_id="reset", application_id="clicks")
    with mock.patch(RESET, return_value=plan(refusals=["live instance(s) in 'clicks-status': clicks-0 (RUNNING)"],
                                             executed=False)):
        with pytest.raises(AirflowException, match=r"refused, nothing changed: live instance\(s\) in 'clicks-status'"):
            operator.execute({})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"application_id": ""}, "application_id is required"),
    ({"application_id": "a", "to_datetime": "2026-01-01T00:00:00Z", "by_duration": 60}, "not both"),
    ({"application_id": "a", "by_duration": "1h"}, "by_duration must be an ISO-8601 duration"),
    ({"application_id": "a", "by_duration": 0}, "by_duration must be > 0"),
    ({"application_id": "a", "timeout": 0}, "timeout must be >= 0.001 s"),
    ({"application_id": "a", "stale_after": "30"}, "stale_after must be a number of seconds or a timedelta"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ResetApplicationOperator(task_id="reset", **kwargs)


def test_templated_fields():
    assert set(ResetApplicationOperator.template_fields) == {
        "application_id", "to_datetime", "by_duration", "input_topics", "state_dir", "stateful_streams_conn_id"}
    ResetApplicationOperator(task_id="reset", application_id="a", by_duration="{{ params.seconds }}")  # checked later
