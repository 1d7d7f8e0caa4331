"""RestorationTrigger and StandbyLagTrigger: exact serialization round trip, and run()
against a fake status source (the hook's async status read mocked)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from unittest import mock

import pytest

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.streams.errors import (
    BrokerUnreachableError,
    StatusFormatError,
    UnknownApplicationError,
)
from airflow_stateful_provider.triggers.status import RestorationTrigger, StandbyLagTrigger
from tests.unit.streams.status.status_documents import changelog, document, snapshot, task

RESTORING = snapshot(document("i-1", task("0_0"), task("0_1", "active", "restoring", changelog(1, 0, 40, 100, 10.0))))
RUNNING = snapshot(document("i-1", task("0_0"), task("0_1")))


def run_to_event(trigger, statuses):
    """Run the trigger with aget_status returning/raising ``statuses`` in turn (the last repeats)."""
    calls = []

    async def fake_status(self, application_id, **kwargs):
        calls.append((application_id, kwargs))
        item = statuses[min(len(calls), len(statuses)) - 1]
        if isinstance(item, BaseException):
            raise item
        return item

    async def first_event():
        events = [e async for e in trigger.run()]
        assert len(events) == 1, events
        return events[0]

    with mock.patch.object(StatefulStreamsHook, "aget_status", fake_status):
        event = asyncio.run(asyncio.wait_for(first_event(), timeout=10))
    return event.payload, calls


@pytest.mark.parametrize("trigger", [
    RestorationTrigger(application_id="clicks", task_ids=["0_1", "0_0"], max_remaining_records=5,
                       stateful_streams_conn_id="kafka_prod", stale_after=20, poll_interval=2.5,
                       deadline=1_800_000_000.5, read_timeout=3.5),
    RestorationTrigger(application_id="clicks"),
    StandbyLagTrigger(application_id="clicks", max_lag_records=1_000, min_standbys_per_task=2, task_ids=None,
                      deadline=1_800_000_000.0),
])
def test_serialize_round_trips_exactly(trigger):
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    assert (module, name) == ("airflow_stateful_provider.triggers.status", type(trigger).__name__)
    again = type(trigger)(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    assert vars(again).keys() >= kwargs.keys()
    assert all(getattr(again, k) == v for k, v in kwargs.items())


def test_serialized_kwargs_survive_airflow_serde():
    from airflow.sdk.serde import deserialize, serialize

    trigger = StandbyLagTrigger(application_id="clicks", max_lag_records=7, task_ids="0_0,1_0", deadline=2e9)
    classpath, kwargs = trigger.serialize()
    assert StandbyLagTrigger(**deserialize(serialize(kwargs))).serialize() == (classpath, kwargs)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"application_id": ""}, "application_id must be a non-empty string"),
    ({"application_id": "a", "poll_interval": 0}, "poll_interval must be a number of seconds > 0"),
    ({"application_id": "a", "stale_after": 0}, "stale_after must be a number of seconds > 0"),
    ({"application_id": "a", "read_timeout": "3"}, "read_timeout must be a number of seconds > 0"),
    ({"application_id": "a", "stale_after_ms": 0}, "stale_after_ms must be an int of milliseconds > 0"),
    ({"application_id": "a", "task_ids": ["x"]}, "'x' is not a task id"),
    ({"application_id": "a", "max_remaining_records": -3}, "max_remaining_records must be an int >= 0, got -3"),
])
def test_bad_trigger_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RestorationTrigger(**kwargs)


def test_restoration_trigger_polls_until_running():
    trigger = RestorationTrigger(application_id="clicks", poll_interval=0.01, deadline=time.time() + 30,
                                 task_ids=["0_1"], read_timeout=4)
    payload, calls = run_to_event(trigger, [RESTORING, RESTORING, RUNNING])
    assert payload["status"] == "success"
    assert len(calls) == 3
    assert calls[0] == ("clicks", {"stale_after": timedelta(seconds=30), "timeout": timedelta(seconds=4),
                                   "expected_tasks": ["0_1"]})
    assert "1/1 task(s) done" in payload["message"]
    assert "0_1" in payload["table"] and payload["status_json"]["application_id"] == "clicks"


def test_int_durations_are_seconds_and_the_trigger_waits_them():
    """poll_interval=1, read_timeout=4, stale_after=20 are seconds: the second read comes a
    second after the first, and the hook is asked for a 4 s read of 20 s staleness."""
    trigger = RestorationTrigger(application_id="clicks", poll_interval=1, deadline=time.time() + 30,
                                 read_timeout=4, stale_after=20)
    started = time.monotonic()
    payload, calls = run_to_event(trigger, [RESTORING, RUNNING])
    assert payload["status"] == "success" and len(calls) == 2
    assert 1 <= time.monotonic() - started < 5
    assert calls[0][1]["timeout"] == timedelta(seconds=4) and calls[0][1]["stale_after"] == timedelta(seconds=20)


def test_a_trigger_serialized_by_an_earlier_release_keeps_its_milliseconds():
    legacy = RestorationTrigger(application_id="clicks", stale_after_ms=20_000, read_timeout_ms=3_000)
    _, kwargs = legacy.serialize()
    assert (kwargs["stale_after"], kwargs["read_timeout"]) == (20.0, 3.0)
    assert "stale_after_ms" not in kwargs and "read_timeout_ms" not in kwargs


def test_timeout_event_carries_the_stuck_tasks():
    trigger = RestorationTrigger(application_id="clicks", poll_interval=0.05, deadline=time.time() + 0.3)
    started = time.monotonic()
    payload, calls = run_to_event(trigger, [RESTORING])
    assert 0.25 < time.monotonic() - started < 3
    assert payload["status"] == "timeout"
    assert "restoration of application 'clicks' not reached by the deadline" in payload["message"]
    lines = payload["table"].splitlines()
    assert [line.split()[0] for line in lines[2:]] == ["0_1"]
    assert "60 offsets remaining" in payload["table"]
    assert payload["status_json"]["tasks"][1]["state"] == "restoring"
    assert len(calls) >= 3


def test_read_timeout_is_capped_by_the_time_left():
    trigger = RestorationTrigger(application_id="clicks", poll_interval=0.05, deadline=time.time() + 2.0,
                                 read_timeout=60)
    _, calls = run_to_event(trigger, [RUNNING])
    assert timedelta(seconds=1) <= calls[0][1]["timeout"] <= timedelta(seconds=2)


def test_transient_errors_are_retried_and_named_on_timeout():
    trigger = RestorationTrigger(application_id="clicks", poll_interval=0.05, deadline=time.time() + 0.3)
    payload, _ = run_to_event(trigger, [UnknownApplicationError("unknown application 'clicks': no status topic")])
    assert payload["status"] == "timeout"
    assert "last status read failed: UnknownApplicationError: unknown application 'clicks'" in payload["message"]
    assert payload["table"] == "no status was read before the deadline" and payload["status_json"] is None

    trigger = RestorationTrigger(application_id="clicks", poll_interval=0.01, deadline=time.time() + 30)
    payload, calls = run_to_event(trigger, [BrokerUnreachableError("cannot reach Kafka"), RUNNING])
    assert payload["status"] == "success" and len(calls) == 2


def test_malformed_status_ends_with_an_error_event():
    trigger = RestorationTrigger(application_id="clicks", poll_interval=0.01, deadline=time.time() + 30)
    payload, calls = run_to_event(trigger, [RESTORING, StatusFormatError("field 'epoch' must be an int")])
    assert payload["status"] == "error" and len(calls) == 2
    assert "StatusFormatError: field 'epoch' must be an int" in payload["message"]
    assert "0_1" in payload["table"]  # what was still restoring at the last good read


def test_missing_connection_is_an_error_event_not_a_retry(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NOPE", raising=False)
    trigger = RestorationTrigger(application_id="clicks", stateful_streams_conn_id="nope", poll_interval=0.01,
                                 deadline=time.time() + 30)

    async def first():
        return await anext(trigger.run())

    payload = asyncio.run(asyncio.wait_for(first(), timeout=10)).payload
    assert payload["status"] == "error" and "nope" in payload["message"]


def test_standby_lag_trigger_fires_when_the_standby_catches_up():
    def standby_at(current):
        return snapshot(document("i-1", task("0_0")),
                        document("i-2", task("0_0", "standby", "running", changelog(0, 0, current, None))),
                        ends={("clicks-counts-changelog", 0): 1_000})

    trigger = StandbyLagTrigger(application_id="clicks", max_lag_records=100, poll_interval=0.01,
                                deadline=time.time() + 30)
    payload, calls = run_to_event(trigger, [standby_at(0), standby_at(850), standby_at(950)])
    assert payload["status"] == "success" and len(calls) == 3
    assert "i-2@host-i-2 (50)" in payload["table"]


def test_no_deadline_polls_until_done():
    trigger = RestorationTrigger(application_id="clicks", poll_interval=0.01)
    payload, calls = run_to_event(trigger, [RESTORING] * 5 + [RUNNING])
    assert payload["status"] == "success" and len(calls) == 6
