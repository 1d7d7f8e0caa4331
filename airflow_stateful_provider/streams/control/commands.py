"""Commands of the control topic ``<application_id>-control`` and how they were answered.

Operators (the ``stateful-streams stop`` CLI, the Airflow hook) send a :class:`ControlCommand`
to the application's control topic; every instance it addresses applies it at a safe
point of its loop and acknowledges it in its status document (``accepted``, then ``done``
or ``failed``). :func:`command_outcome` reads those acknowledgements back into a
:class:`CommandOutcome`: who answered, who failed, who is still missing.

This module is pure (no Kafka client): the format and the outcome arithmetic are tested
without a broker. Sending and waiting live in :mod:`.channel`, applying
in :mod:`.listener` (see docs/control-topic.md).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.errors import ControlFormatError
from airflow_stateful_provider.streams.status.document import InstanceStatus
from airflow_stateful_provider.streams.status.document_parts import CommandAcknowledgement

__all__ = [
    "COMMAND_TYPES",
    "CONTROL_FORMAT_VERSION",
    "MAINTENANCE_COMMANDS",
    "ACK_ACCEPTED",
    "ACK_DONE",
    "ACK_FAILED",
    "ControlCommand",
    "CommandOutcome",
    "new_command",
    "command_outcome",
]

COMMAND_TYPES = ("stop", "restart", "checkpoint", "enforce_retention", "compact")
#: Version of the command layout written by this code; readers reject newer ones.
CONTROL_FORMAT_VERSION = 1
#: Commands that act on session and versioned stores (and so may name ``stores``).
MAINTENANCE_COMMANDS = ("enforce_retention", "compact")

#: Acknowledgement statuses: received (not terminal), applied, or failed (``{"error": ...}``).
ACK_ACCEPTED = "accepted"
ACK_DONE = "done"
ACK_FAILED = "failed"
_TERMINAL = (ACK_DONE, ACK_FAILED)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _names(value: Any, field: str, command_id: Any) -> tuple[str, ...] | None:
    """None, or a non-empty list of non-empty strings (duplicates dropped, order kept)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise _bad(command_id, field, "must be null or a list of non-empty strings", value)
    names = tuple(value)
    if not names or any(not isinstance(n, str) or not n for n in names):
        raise _bad(command_id, field, "must be null or a non-empty list of non-empty strings", value)
    return tuple(dict.fromkeys(names))


def _bad(command_id: Any, field: str, problem: str, value: Any) -> ControlFormatError:
    who = f"control command {command_id!r}" if isinstance(command_id, str) and command_id else "control command"
    return ControlFormatError(f"{who}: field {field!r} {problem}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class ControlCommand:
    """One command of the control topic (every field in docs/control-topic.md).

    ``instances`` None addresses every instance; ``stores`` None selects every session
    and versioned store an instance holds (maintenance commands only); ``now_ms`` is the
    time retention is measured against (``enforce_retention`` only; None = the instance's
    wall clock). Fields are checked on construction: a bad command never reaches the topic.
    """

    command_id: str
    command_type: str
    application_id: str
    issued_at_ms: int
    instances: tuple[str, ...] | None = None
    stores: tuple[str, ...] | None = None
    now_ms: int | None = None

    def __post_init__(self) -> None:
        cid = self.command_id
        if not isinstance(cid, str) or not cid:
            raise _bad(None, "command_id", "must be a non-empty string", cid)
        if self.command_type not in COMMAND_TYPES:
            raise _bad(cid, "command_type", f"must be one of {list(COMMAND_TYPES)}", self.command_type)
        if not isinstance(self.application_id, str) or not self.application_id:
            raise _bad(cid, "application_id", "must be a non-empty string", self.application_id)
        if not _is_int(self.issued_at_ms) or self.issued_at_ms < 0:
            raise _bad(cid, "issued_at_ms", "must be an int >= 0 (epoch ms)", self.issued_at_ms)
        object.__setattr__(self, "instances", _names(self.instances, "instances", cid))
        object.__setattr__(self, "stores", _names(self.stores, "stores", cid))
        if self.stores is not None and self.command_type not in MAINTENANCE_COMMANDS:
            raise _bad(cid, "stores", f"is only for {list(MAINTENANCE_COMMANDS)}, not {self.command_type!r}",
                       self.stores)
        if self.now_ms is not None:
            if self.command_type != "enforce_retention":
                raise _bad(cid, "now_ms", f"is only for 'enforce_retention', not {self.command_type!r}", self.now_ms)
            if not _is_int(self.now_ms) or self.now_ms < 0:
                raise _bad(cid, "now_ms", "must be null or an int >= 0 (epoch ms)", self.now_ms)

    def applies_to(self, instance_id: str) -> bool:
        """Whether the instance ``instance_id`` must apply (and answer) this command."""
        return self.instances is None or instance_id in self.instances

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": CONTROL_FORMAT_VERSION,
            "command_id": self.command_id,
            "command_type": self.command_type,
            "application_id": self.application_id,
            "issued_at_ms": self.issued_at_ms,
            "instances": None if self.instances is None else list(self.instances),
            "stores": None if self.stores is None else list(self.stores),
            "now_ms": self.now_ms,
        }

    def to_json_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_json_bytes(cls, raw: bytes | str | None) -> ControlCommand:
        """Strict parse of a control record value. Unknown extra fields are ignored (a
        writer may add optional ones without a version bump); ``instances``, ``stores``
        and ``now_ms`` may be absent (null)."""
        if raw is None:
            raise ControlFormatError("control command: the record has no value (null)")
        try:
            text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
            data = json.loads(text)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ControlFormatError(f"control command is not valid UTF-8 JSON: {exc}; got {raw[:200]!r}") from None
        if not isinstance(data, Mapping):
            raise ControlFormatError(f"control command must be a JSON object, got {type(data).__name__}: {data!r}")
        cid = data.get("command_id")
        for required in ("format_version", "command_id", "command_type", "application_id", "issued_at_ms"):
            if required not in data:
                raise _bad(cid, required, "is missing", None)
        version = data["format_version"]
        if not _is_int(version) or version < 1:
            raise _bad(cid, "format_version", "must be an int >= 1", version)
        if version > CONTROL_FORMAT_VERSION:
            raise _bad(cid, "format_version", f"is newer than the {CONTROL_FORMAT_VERSION} this instance "
                                              f"understands (upgrade airflow-stateful-provider on the instances)",
                       version)
        return cls(command_id=data["command_id"], command_type=data["command_type"],
                   application_id=data["application_id"], issued_at_ms=data["issued_at_ms"],
                   instances=data.get("instances"), stores=data.get("stores"), now_ms=data.get("now_ms"))


def new_command(
    application_id: str,
    command_type: str,
    *,
    instances: Iterable[str] | None = None,
    stores: Iterable[str] | None = None,
    now_ms: int | None = None,
    command_id: str | None = None,
) -> ControlCommand:
    """A command issued now, with a fresh id ``<type>-<12 hex digits>`` unless given."""
    if command_type not in COMMAND_TYPES:
        raise ControlFormatError(f"unknown control command type {command_type!r}; known: {list(COMMAND_TYPES)}")
    return ControlCommand(
        command_id=command_id if command_id is not None else f"{command_type}-{uuid.uuid4().hex[:12]}",
        command_type=command_type, application_id=application_id, issued_at_ms=wall_clock_ms(),
        instances=None if instances is None else tuple(instances),
        stores=None if stores is None else tuple(stores), now_ms=now_ms)


@dataclasses.dataclass(frozen=True)
class CommandOutcome:
    """How the instances answered one command.

    ``acknowledgements``: the latest acknowledgement of the command per instance that
    sent one. ``missing``: the expected instances without a terminal answer; for
    ``stop`` an instance whose document is gone (tombstone) or shows NOT_RUNNING has
    answered, whatever it acknowledged (it removes its document when it stops).
    """

    command: ControlCommand
    acknowledgements: Mapping[str, CommandAcknowledgement]
    missing: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def failed(self) -> tuple[str, ...]:
        """Instances whose answer is "failed"."""
        return tuple(i for i, ack in self.acknowledgements.items() if ack.status == ACK_FAILED)

    @property
    def succeeded(self) -> bool:
        return self.complete and not self.failed


def command_outcome(command: ControlCommand, documents: Mapping[str, InstanceStatus],
                    expected_instances: Iterable[str]) -> CommandOutcome:
    """The outcome of ``command`` as the status ``documents`` (by instance id) show it,
    for the instances that must answer (see :class:`CommandOutcome`)."""
    acknowledgements: dict[str, CommandAcknowledgement] = {}
    for instance_id, document in sorted(documents.items()):
        mine = [a for a in document.acknowledgements if a.command_id == command.command_id]
        if mine:
            acknowledgements[instance_id] = mine[-1]

    def answered(instance_id: str) -> bool:
        ack = acknowledgements.get(instance_id)
        if ack is not None and ack.status in _TERMINAL:
            return True
        if command.command_type == "stop":
            document = documents.get(instance_id)
            return document is None or document.state == "NOT_RUNNING"
        return False

    missing = tuple(i for i in dict.fromkeys(expected_instances) if not answered(i))
    return CommandOutcome(command, acknowledgements, missing)
