"""ClientState: the validated input describing one client."""

from __future__ import annotations

import uuid

import pytest

from airflow_stateful_provider.streams.assignment.client_state import (
    AssignedClient,
    ClientState,
    InvalidAssignmentInputError,
)
from airflow_stateful_provider.streams.assignment.lag import NO_STATE_LAG
from airflow_stateful_provider.streams.errors import StreamsError
from airflow_stateful_provider.streams.task_id import TaskId

T00, T01 = TaskId(0, 0), TaskId(0, 1)


def test_missing_lag_means_no_state() -> None:
    state = ClientState("p", task_lags={T00: -2})
    assert state.lag_for(T00) == -2
    assert state.lag_for(T01) == NO_STATE_LAG


def test_inputs_are_copied_and_read_only() -> None:
    lags = {T00: 5}
    state = ClientState("p", previous_active_tasks=[T00], task_lags=lags, client_tags={"zone": "a"})
    lags[T00] = 7
    assert state.lag_for(T00) == 5
    assert state.previous_active_tasks == frozenset({T00})
    with pytest.raises(TypeError):
        state.task_lags[T01] = 1  # type: ignore[index]
    assert state == ClientState("p", previous_active_tasks={T00}, task_lags={T00: 5}, client_tags={"zone": "a"})
    assert hash(state) == hash(ClientState("p", previous_active_tasks={T00}))


def test_uuid_process_ids_are_accepted() -> None:
    pid = uuid.UUID(int=1)
    assert ClientState(pid).process_id == pid


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"process_id": ""}, "process_id must be a non-empty str or a uuid.UUID, got ''"),
        ({"process_id": 7}, "process_id must be a non-empty str or a uuid.UUID, got 7"),
        ({"capacity": 0}, "client p: capacity (stream thread count) must be an int >= 1, got 0"),
        ({"capacity": 2.0}, "client p: capacity (stream thread count) must be an int >= 1, got 2.0"),
        ({"task_lags": {T00: -1}},
         "client p: lag of task 0_0 must be an int >= 0 or -2 (running active), got -1"),
        ({"task_lags": {T00: None}},
         "client p: lag of task 0_0 must be an int >= 0 or -2 (running active), got None"),
        ({"client_tags": {"zone": 1}}, "client p: client tags must map str to str, got 'zone': 1"),
        ({"previous_active_tasks": "0_0"},
         "client p: previous_active_tasks must be a collection of task ids, got '0_0'"),
        ({"previous_standby_tasks": ["0_0"]},
         "client p: previous_standby_tasks must hold task ids, got '0_0'"),
    ],
)
def test_bad_client_state_names_the_value(kwargs: dict, message: str) -> None:
    kwargs = {"process_id": "p", **kwargs}
    with pytest.raises(InvalidAssignmentInputError) as excinfo:
        ClientState(**kwargs)
    assert str(excinfo.value) == message
    assert isinstance(excinfo.value, StreamsError) and isinstance(excinfo.value, ValueError)


def test_assigned_client_loads_are_per_thread() -> None:
    client = AssignedClient(ClientState("p", capacity=4))
    client.assign_active(T00)
    client.assign_standby(T01)
    assert client.assigned_task_load() == 0.5
    assert client.active_task_load() == 0.25
    with pytest.raises(AssertionError, match="already holds task 0_0"):
        client.assign_standby(T00)
