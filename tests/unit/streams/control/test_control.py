"""The control command format (strict parser) and command_outcome, without a broker."""

from __future__ import annotations

import json

import pytest

from airflow_stateful_provider.streams.control.commands import (
    COMMAND_TYPES,
    CONTROL_FORMAT_VERSION,
    ControlCommand,
    command_outcome,
    new_command,
)
from airflow_stateful_provider.streams.errors import ControlFormatError
from airflow_stateful_provider.streams.status.document import InstanceStatus
from airflow_stateful_provider.streams.status.document_parts import CommandAcknowledgement


def raw(**fields) -> bytes:
    base = {"format_version": 1, "command_id": "c-1", "command_type": "compact", "application_id": "app",
            "issued_at_ms": 1_000}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...}).encode()


def test_round_trip_keeps_every_field():
    command = new_command("app", "enforce_retention", instances=["i-1", "i-2"], stores=["sessions"], now_ms=5_000,
                          command_id="maint-1")
    assert ControlCommand.from_json_bytes(command.to_json_bytes()) == command
    assert command.instances == ("i-1", "i-2") and command.stores == ("sessions",)
    assert json.loads(command.to_json_bytes())["format_version"] == CONTROL_FORMAT_VERSION


def test_new_command_generates_an_id_with_the_type_and_stamps_the_time():
    command = new_command("app", "stop")
    prefix, _, suffix = command.command_id.partition("-")
    assert prefix == "stop" and len(suffix) == 12 and int(suffix, 16) >= 0
    assert command.issued_at_ms > 1_600_000_000_000
    assert new_command("app", "stop").command_id != command.command_id


def test_new_command_rejects_an_unknown_type_listing_the_known_ones():
    with pytest.raises(ControlFormatError,
                       match=r"'reboot'.*\['stop', 'restart', 'checkpoint', 'enforce_retention', 'compact'\]"):
        new_command("app", "reboot")


def test_optional_fields_may_be_absent():
    command = ControlCommand.from_json_bytes(raw())
    assert (command.instances, command.stores, command.now_ms) == (None, None, None)


def test_unknown_extra_fields_are_ignored():
    assert ControlCommand.from_json_bytes(raw(added_later=True)).command_id == "c-1"


@pytest.mark.parametrize("value, message", [
    (b"not json", "not valid UTF-8 JSON"),
    (b"\xff\xfe", "not valid UTF-8 JSON"),
    (b"[1, 2]", "must be a JSON object, got list"),
    (None, "no value"),
    (raw(command_type="reboot"), "field 'command_type' must be one of .* got 'reboot'"),
    (raw(format_version=2), "field 'format_version' is newer than the 1 .* got 2"),
    (raw(format_version="1"), "field 'format_version' must be an int >= 1, got '1'"),
    (raw(command_id=...), "field 'command_id' is missing"),
    (raw(command_id=""), "field 'command_id' must be a non-empty string, got ''"),
    (raw(application_id=7), "field 'application_id' must be a non-empty string, got 7"),
    (raw(issued_at_ms=True), "field 'issued_at_ms' must be an int >= 0 .* got True"),
    (raw(instances="i-1"), "field 'instances' must be null or a list .* got 'i-1'"),
    (raw(instances=[]), "field 'instances' must be null or a non-empty list .* got \\[\\]"),
    (raw(stores=["ok", 3]), "field 'stores' must be null or a non-empty list .* got \\['ok', 3\\]"),
    (raw(command_type="stop", stores=["s"]), "field 'stores' is only for .* not 'stop'"),
    (raw(now_ms=5), "field 'now_ms' is only for 'enforce_retention', not 'compact'"),
    (raw(command_type="enforce_retention", now_ms=-1), "field 'now_ms' must be null or an int >= 0 .* got -1"),
    (raw(command_type="enforce_retention", now_ms=1.5), "field 'now_ms' must be null or an int >= 0 .* got 1.5"),
])
def test_malformed_commands_name_the_field_and_value(value, message):
    with pytest.raises(ControlFormatError, match=message):
        ControlCommand.from_json_bytes(value)


def test_errors_name_the_command_id():
    with pytest.raises(ControlFormatError, match=r"control command 'c-1': field 'now_ms'"):
        ControlCommand.from_json_bytes(raw(now_ms=5))


def test_applies_to_every_instance_or_the_named_ones():
    everyone = new_command("app", "checkpoint")
    some = new_command("app", "checkpoint", instances=["i-1"])
    assert everyone.applies_to("i-1") and everyone.applies_to("i-9")
    assert some.applies_to("i-1") and not some.applies_to("i-2")


def test_duplicate_names_are_dropped_in_order():
    assert new_command("app", "compact", stores=["b", "a", "b"]).stores == ("b", "a")


def test_command_types_are_the_documented_five():
    assert COMMAND_TYPES == ("stop", "restart", "checkpoint", "enforce_retention", "compact")


# ---------------------------------------------------------------------------- outcome


def document(instance_id: str, *acks: tuple[str, str, object], state: str = "RUNNING") -> InstanceStatus:
    return InstanceStatus(instance_id=instance_id, application_id="app", state=state, epoch=1, host="h", pid=1,
                          process_id="p", published_at=0,
                          acknowledgements=tuple(CommandAcknowledgement(cid, status, result, at)
                                                 for at, (cid, status, result) in enumerate(acks)))


def test_outcome_takes_the_latest_answer_per_instance():
    command = new_command("app", "compact", command_id="c-1")
    docs = {"a": document("a", ("c-1", "accepted", None), ("c-0", "done", {}), ("c-1", "done", {"stores": []})),
            "b": document("b", ("c-1", "accepted", None))}
    outcome = command_outcome(command, docs, ["a", "b"])
    assert outcome.acknowledgements["a"].status == "done"
    assert outcome.acknowledgements["b"].status == "accepted"
    assert outcome.missing == ("b",)  # accepted is not an answer yet
    assert not outcome.complete and not outcome.succeeded and outcome.failed == ()


def test_outcome_complete_succeeded_and_failed():
    command = new_command("app", "checkpoint", command_id="c-1")
    done = {"a": document("a", ("c-1", "done", {"tasks": ["0_0"]})), "b": document("b", ("c-1", "done", {}))}
    assert command_outcome(command, done, ["a", "b"]).succeeded
    failing = {**done, "b": document("b", ("c-1", "failed", {"error": "boom"}))}
    outcome = command_outcome(command, failing, ["a", "b"])
    assert outcome.complete and outcome.failed == ("b",) and not outcome.succeeded


def test_expected_instances_without_a_document_are_missing_for_maintenance():
    command = new_command("app", "checkpoint", command_id="c-1")
    outcome = command_outcome(command, {"a": document("a", ("c-1", "done", {}))}, ["a", "gone", "a"])
    assert outcome.missing == ("gone",)


def test_stop_is_answered_by_a_removed_document_or_not_running():
    command = new_command("app", "stop", command_id="s-1")
    docs = {"b": document("b", ("s-1", "accepted", None), state="NOT_RUNNING"),
            "c": document("c", ("s-1", "accepted", None), state="PENDING_SHUTDOWN"),
            "d": document("d")}
    outcome = command_outcome(command, docs, ["a", "b", "c", "d"])
    assert outcome.missing == ("c", "d")
    assert set(outcome.acknowledgements) == {"b", "c"}


def test_unexpected_instances_are_reported_but_never_missing():
    command = new_command("app", "compact", command_id="c-1", instances=["a"])
    docs = {"a": document("a", ("c-1", "done", {})), "x": document("x", ("c-1", "failed", {"error": "?"}))}
    outcome = command_outcome(command, docs, ["a"])
    assert outcome.complete and outcome.failed == ("x",)
