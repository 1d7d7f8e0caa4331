"""RestorationSensor and StandbyLagSensor without a broker (the hook's status read mocked):
poke logs the table and returns the condition, poke-mode timeouts carry the stuck tasks,
deferral hands the right trigger and timeout over, execute_complete, templating."""

from __future__ import annotations

import time
from datetime import timedelta
from unittest import mock

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowSensorTimeout, TaskDeferred

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.sensors.base import DEFERRAL_TIMEOUT_GRACE
from airflow_stateful_provider.sensors.restoration import RestorationSensor
from airflow_stateful_provider.sensors.standby_lag import StandbyLagSensor
from airflow_stateful_provider.streams.errors import BrokerUnreachableError, StatusFormatError
from airflow_stateful_provider.triggers.status import RestorationTrigger, StandbyLagTrigger
from tests.unit.streams.status.status_documents import changelog, document, snapshot, task

RESTORING = snapshot(document("i-1", task("0_0"), task("0_1", "active", "restoring", changelog(1, 0, 40, 100, 10.0))))
RUNNING = snapshot(document("i-1", task("0_0"), task("0_1")))
STANDBY_OK = snapshot(document("i-1", task("0_0")),
                      document("i-2", task("0_0", "standby", "running", changelog(0, 0, 990, None))),
                      ends={("clicks-counts-changelog", 0): 1_000})


@pytest.fixture
def statuses():
    """Make the hook's status read return (or raise) the listed items in turn; the last repeats."""
    items: list = []
    calls: list = []

    def fake(self, application_id, **kwargs):
        calls.append((self.stateful_streams_conn_id, application_id, kwargs))
        item = items[min(len(calls), len(items)) - 1]
        if isinstance(item, BaseException):
            raise item
        return item

    with mock.patch.object(StatefulStreamsHook, "get_status", fake):
        yield items, calls


def test_poke_logs_the_progress_table_and_returns_the_condition(statuses, capsys):
    # The Task SDK's operator logger is structlog, printed to stdout outside a task run.
    items, calls = statuses
    items += [RESTORING, RUNNING]
    sensor = RestorationSensor(task_id="restored", application_id="clicks", stateful_streams_conn_id="prod",
                               stale_after=timedelta(seconds=20), read_timeout=timedelta(seconds=4))
    assert sensor.poke({}) is False
    logged = capsys.readouterr().out
    assert "40/100 (40%)" in logged and "10/s" in logged and "60 offsets remaining (> 0), ETA 6s" in logged
    assert sensor.poke({}) is True
    assert "2/2 task(s) done - COMPLETE" in capsys.readouterr().out
    assert calls[0] == ("prod", "clicks", {"stale_after": timedelta(seconds=20), "timeout": timedelta(seconds=4),
                                           "expected_tasks": ()})


def test_int_durations_are_seconds_and_the_poke_mode_waits_them(statuses):
    """Airflow's convention: stale_after=20, read_timeout=4 and poll_interval=1 are seconds
    (stale_after and read_timeout used to be milliseconds); timeout=2 ends the wait after 2 s."""
    items, calls = statuses
    items.append(RESTORING)
    sensor = RestorationSensor(task_id="restored", application_id="clicks", stale_after=20, read_timeout=4,
                               poll_interval=1, timeout=2)
    started = time.monotonic()
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute({})
    waited = time.monotonic() - started
    assert 2 <= waited < 10, waited
    assert 2 <= len(calls) <= 4, calls  # a read about every second
    assert calls[0][2]["stale_after"] == timedelta(seconds=20) and calls[0][2]["timeout"] == timedelta(seconds=4)


def test_poke_passes_task_ids_as_expected_tasks(statuses):
    items, calls = statuses
    items.append(RUNNING)
    assert RestorationSensor(task_id="t", application_id="clicks", task_ids="0_1").poke({}) is True
    assert calls[0][2]["expected_tasks"] == ("0_1",)


def test_transient_read_failure_is_not_done_but_a_malformed_status_fails(statuses):
    items, _ = statuses
    items += [BrokerUnreachableError("cannot reach Kafka at b:1"), StatusFormatError("bad epoch")]
    sensor = RestorationSensor(task_id="t", application_id="clicks")
    assert sensor.poke({}) is False
    with pytest.raises(StatusFormatError, match="bad epoch"):
        sensor.poke({})


def test_poke_mode_timeout_message_holds_the_stuck_tasks(statuses):
    items, _ = statuses
    items.append(RESTORING)
    sensor = RestorationSensor(task_id="t", application_id="clicks", timeout=0.2, poll_interval=0.05)
    with pytest.raises(AirflowSensorTimeout) as info:
        sensor.execute({})
    message = str(info.value)
    assert "Sensor has timed out" in message
    assert "0_1   restoring" in message and "60 offsets remaining" in message
    assert "\n0_0 " not in message  # done tasks are left out


def test_poke_mode_timeout_names_the_last_read_failure(statuses):
    items, _ = statuses
    items.append(BrokerUnreachableError("cannot reach Kafka at b:1"))
    sensor = StandbyLagSensor(task_id="t", application_id="clicks", max_lag_records=5, timeout=0.1,
                              poll_interval=0.05)
    with pytest.raises(AirflowSensorTimeout, match="last status read failed: BrokerUnreachableError: cannot reach"):
        sensor.execute({})


def test_poke_mode_returns_when_done(statuses):
    items, _ = statuses
    items += [STANDBY_OK]
    assert StandbyLagSensor(task_id="t", application_id="clicks", max_lag_records=10).execute({}) is None


def test_deferrable_defers_to_the_trigger_with_deadline_and_backstop_timeout(statuses):
    items, _ = statuses
    items.append(RESTORING)
    sensor = RestorationSensor(task_id="t", application_id="clicks", task_ids=["0_1"], max_remaining_records=7,
                               deferrable=True, timeout=600, poll_interval=15, stateful_streams_conn_id="prod",
                               stale_after=timedelta(seconds=45))
    before = time.time()
    with pytest.raises(TaskDeferred) as info:
        sensor.execute({})
    deferred = info.value
    assert deferred.method_name == "execute_complete"
    assert deferred.timeout == timedelta(seconds=600) + DEFERRAL_TIMEOUT_GRACE
    trigger = deferred.trigger
    assert isinstance(trigger, RestorationTrigger)
    _, kwargs = trigger.serialize()
    assert before + 600 <= kwargs.pop("deadline") <= time.time() + 600
    assert kwargs == {"application_id": "clicks", "stateful_streams_conn_id": "prod", "task_ids": ["0_1"],
                      "max_remaining_records": 7, "stale_after": 45.0, "poll_interval": 15.0,
                      "read_timeout": 10.0}


def test_deferrable_standby_sensor_builds_its_trigger(statuses):
    items, _ = statuses
    items.append(RESTORING)
    sensor = StandbyLagSensor(task_id="t", application_id="clicks", max_lag_records=9, min_standbys_per_task=2,
                              deferrable=True, timeout=60)
    with pytest.raises(TaskDeferred) as info:
        sensor.execute({})
    assert isinstance(info.value.trigger, StandbyLagTrigger)
    _, kwargs = info.value.trigger.serialize()
    assert (kwargs["max_lag_records"], kwargs["min_standbys_per_task"]) == (9, 2)


def test_deferrable_returns_at_once_when_already_done(statuses):
    items, calls = statuses
    items.append(RUNNING)
    assert RestorationSensor(task_id="t", application_id="clicks", deferrable=True).execute({}) is None
    assert len(calls) == 1


def test_execute_complete_success_timeout_error(capsys):
    sensor = RestorationSensor(task_id="t", application_id="clicks", deferrable=True)
    assert sensor.execute_complete({}, {"status": "success", "message": "all done", "table": "TASK ...",
                                        "status_json": {}}) is None
    assert "all done\nTASK ..." in capsys.readouterr().out
    with pytest.raises(AirflowSensorTimeout) as info:
        sensor.execute_complete({}, {"status": "timeout", "message": "not reached by the deadline",
                                     "table": "0_1 restoring 60 offsets remaining", "status_json": None})
    assert str(info.value) == "not reached by the deadline\n0_1 restoring 60 offsets remaining"
    with pytest.raises(AirflowException) as info:
        sensor.execute_complete({}, {"status": "error", "message": "StatusFormatError: bad", "table": "",
                                     "status_json": None})
    assert not isinstance(info.value, AirflowSensorTimeout) and str(info.value) == "StatusFormatError: bad"
    with pytest.raises(AirflowException, match="unexpected trigger event"):
        sensor.execute_complete({}, {"message": "no status key"})


def test_templated_fields_render():
    from airflow.sdk import DAG

    with DAG("templating", schedule=None):
        sensor = RestorationSensor(task_id="t", application_id="{{ params.app }}-{{ params.env }}",
                                   task_ids=["{{ params.first }}", "0_1"],
                                   stateful_streams_conn_id="kafka_{{ params.env }}")
    assert set(RestorationSensor.template_fields) == {"application_id", "task_ids", "stateful_streams_conn_id"}
    assert StandbyLagSensor.template_fields == RestorationSensor.template_fields
    sensor.render_template_fields({"params": {"app": "clicks", "env": "prod", "first": "0_0"}})
    assert (sensor.application_id, sensor.task_ids, sensor.stateful_streams_conn_id) == \
        ("clicks-prod", ["0_0", "0_1"], "kafka_prod")
    assert sensor.hook.stateful_streams_conn_id == "kafka_prod"


def test_rendered_task_ids_are_validated_at_use(statuses):
    items, _ = statuses
    items.append(RUNNING)
    sensor = RestorationSensor(task_id="t", application_id="clicks", task_ids="{{ params.tasks }}")
    sensor.render_template_fields({"params": {"tasks": "0_0,zero"}})
    with pytest.raises(ValueError, match="'zero' is not a task id"):
        sensor.poke({})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"poll_interval": 5, "poke_interval": 10}, "poll_interval 5 and poke_interval 10 disagree"),
    ({"poll_interval": 0}, "poll_interval must be > 0 seconds"),
    ({"stale_after": 0}, "stale_after must be >= 0.001 s"),
    ({"read_timeout": "10"}, "read_timeout must be a number of seconds or a timedelta, got str '10'"),
    ({"max_remaining_records": -1}, "max_remaining_records must be an int >= 0, got -1"),
])
def test_bad_sensor_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RestorationSensor(task_id="t", application_id="clicks", **kwargs)


def test_poll_interval_sets_the_poke_interval():
    assert RestorationSensor(task_id="t", application_id="a", poll_interval=timedelta(seconds=7)).poke_interval == 7
    assert RestorationSensor(task_id="t", application_id="a", poke_interval=9).poke_interval == 9
    assert RestorationSensor(task_id="t", application_id="a").poke_interval == 30


def test_standby_sensor_arguments_are_checked():
    with pytest.raises(ValueError, match="min_standbys_per_task must be an int >= 1, got 0"):
        StandbyLagSensor(task_id="t", application_id="a", max_lag_records=1, min_standbys_per_task=0)
