"""RollingRestartOperator without a broker: seconds for durations, the instances, what reaches
rolling_restart, the report on XCom, and a stuck step failing the task."""

from __future__ import annotations

import json
from datetime import timedelta
from unittest import mock

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_stateful_provider.operators.restart import RollingRestartOperator
from airflow_stateful_provider.streams.control.rolling_restart import InstanceRestart, RollingRestartReport
from airflow_stateful_provider.streams.errors import RollingRestartError

RESTART = "airflow_stateful_provider.streams.control.rolling_restart.rolling_restart"


@pytest.fixture(autouse=True)
def connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT",
                       json.dumps({"conn_type": "stateful_streams", "host": "b1:9092"}))


def test_durations_are_seconds_and_the_report_goes_to_xcom():
    operator = RollingRestartOperator(task_id="restart", application_id="clicks", instances="clicks-1, clicks-0",
                                      step_timeout=90, stale_after=timedelta(seconds=20), max_lag_records=500)
    report = RollingRestartReport("clicks", 500, (InstanceRestart("clicks-1", 3, 4, ("0_1",), 0.5, 4.25),), 5.0)
    with mock.patch(RESTART, return_value=report) as restart:
        result = operator.execute({})
    args, kwargs = restart.call_args
    assert args == (["b1:9092"], "clicks")
    assert (kwargs["step_timeout_ms"], kwargs["stale_after_ms"]) == (90_000, 20_000)
    assert kwargs["instances"] == ["clicks-1", "clicks-0"] and kwargs["max_lag_records"] == 500
    assert result["restarts"] == [{"instance_id": "clicks-1", "old_epoch": 3, "new_epoch": 4, "active_tasks": ["0_1"],
                                   "standby_wait_s": 0.5, "restart_s": 4.25}]


def test_a_step_that_does_not_finish_fails_the_task_with_its_message():
    operator = RollingRestartOperator(task_id="restart", application_id="clicks")
    error = RollingRestartError("rolling restart of clicks stopped at clicks-0: caught-up standbys ... not within 300s")
    with mock.patch(RESTART, side_effect=error):
        with pytest.raises(AirflowException, match="stopped at clicks-0"):
            operator.execute({})


@pytest.mark.parametrize(("kwargs", "message"), [({"max_lag_records": -1}, "max_lag_records must be an int >= 0"),
                                                 ({"step_timeout": "5m"}, "step_timeout must be a number of seconds"),
                                                 ({"application_id": ""}, "application_id is required")])
def test_bad_arguments_are_refused_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RollingRestartOperator(task_id="restart", **{"application_id": "clicks", **kwargs})
