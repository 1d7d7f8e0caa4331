"""The task directory's identity file (state/common/task_identity.py): round trip, strict parsing."""

from __future__ import annotations

import json
import os

import pytest

from airflow_stateful_provider.streams.errors import ForeignStateError
from airflow_stateful_provider.streams.state.common.task_identity import (
    IDENTITY_FILE_NAME,
    TaskIdentity,
    read_identity,
    write_identity,
)

IDENTITY = TaskIdentity("clicks", "0_1", {"counts": "clicks-counts-changelog", "dedup": None})


def test_identity_round_trips_and_replaces_atomically(tmp_path):
    assert read_identity(tmp_path) is None  # no file yet: an earlier build's directory, or a new one
    write_identity(tmp_path, TaskIdentity("clicks", "0_1", {}))
    write_identity(tmp_path, IDENTITY)
    assert read_identity(tmp_path) == IDENTITY
    assert os.listdir(tmp_path) == [IDENTITY_FILE_NAME]  # no temporary file left
    assert json.loads((tmp_path / IDENTITY_FILE_NAME).read_text()) == {
        "format_version": 1, "application_id": "clicks", "task_id": "0_1",
        "stores": {"counts": "clicks-counts-changelog", "dedup": None}}


def test_describe_names_application_task_and_each_store():
    assert IDENTITY.describe() == ("application 'clicks', task 0_1 (store 'counts' logged to clicks-counts-changelog, "
                                   "store 'dedup' without changelog)")
    assert TaskIdentity("a", "0_0", {}).describe() == "application 'a', task 0_0"


@pytest.mark.parametrize("text, problem", [
    ("{", r"not valid JSON"),
    ("[]", r"must hold a JSON object, got list"),
    ('{"format_version": 2, "application_id": "a", "task_id": "0_0", "stores": {}}', r"format_version 2 is not 1"),
    ('{"format_version": 1, "application_id": "", "task_id": "0_0", "stores": {}}',
     r"field 'application_id' must be a non-empty string, got ''"),
    ('{"format_version": 1, "application_id": "a", "task_id": "0_0", "stores": {"s": 3}}',
     r"field 'stores' must map store names to changelog topics"),
])
def test_a_malformed_identity_file_is_refused_naming_the_file(tmp_path, text, problem):
    (tmp_path / IDENTITY_FILE_NAME).write_text(text)
    with pytest.raises(ForeignStateError, match=problem) as raised:
        read_identity(tmp_path)
    assert str(tmp_path / IDENTITY_FILE_NAME) in str(raised.value)
