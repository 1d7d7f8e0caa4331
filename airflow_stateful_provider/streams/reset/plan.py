"""What an application reset does, as data: the plan a dry run prints and ``--execute``
carries out (application_reset.py), and the parsing of where input offsets go.

Like Kafka's ``kafka-streams-application-reset``: the application's consumer group moves its
committed input offsets (to the earliest, to a point in time, or back by a duration), its
internal topics are deleted (changelogs, repartition topics, and this engine's status,
control and query topics), and its local state directories are removed; refused while an
instance is live. Pure: no Kafka client.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["OffsetChange", "OffsetTarget", "ResetPlan", "offset_target", "parse_duration"]

_ISO_DURATION = re.compile(r"^P(?:(?P<days>\d+(?:\.\d+)?)D)?(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?"
                           r"(?:(?P<minutes>\d+(?:\.\d+)?)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$")


def parse_duration(value: str | float | timedelta, name: str = "by_duration") -> timedelta:
    """An ISO-8601 duration as Kafka's reset tool takes it (``PT1H``, ``P1DT12H``, ``PT90S``), a
    number of seconds, or a timedelta; > 0. ValueError naming ``name`` otherwise."""
    if isinstance(value, timedelta):
        duration = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        duration = timedelta(seconds=value)
    elif isinstance(value, str) and (match := _ISO_DURATION.match(value.strip().upper())) \
            and value.strip().upper() not in ("P", "PT") and not value.strip().upper().endswith("T"):
        parts = {k: float(v) for k, v in match.groupdict().items() if v}
        duration = timedelta(**parts)
    else:
        raise ValueError(f"{name} must be an ISO-8601 duration such as 'PT1H' or 'P1DT12H' (Kafka's --by-duration), "
                         f"a number of seconds or a timedelta, got {value!r}")
    if duration <= timedelta(0):
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return duration


def _aware(value: str | datetime, name: str) -> datetime:
    if isinstance(value, str):
        text = value.strip()
        try:
            moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            raise ValueError(f"{name} must be an ISO-8601 date and time with an offset, such as "
                             f"'2026-01-31T08:00:00+00:00' or '2026-01-31T08:00:00Z', got {value!r}") from None
    elif isinstance(value, datetime):
        moment = value
    else:
        raise ValueError(f"{name} must be an ISO-8601 string or a datetime, got {type(value).__name__} {value!r}")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} {value!r} has no UTC offset: give one ('Z' or '+02:00'), a naive time is ambiguous")
    return moment


@dataclasses.dataclass(frozen=True)
class OffsetTarget:
    """Where the input offsets go: ``timestamp_ms`` None is the earliest offset of each
    partition; otherwise the first offset whose record timestamp is at or after it (the end
    of the partition when there is none). ``text`` says it in words."""

    timestamp_ms: int | None
    text: str


def offset_target(*, to_datetime: str | datetime | None = None, by_duration: str | float | timedelta | None = None,
                  now_ms: int) -> OffsetTarget:
    """The target of the input offsets: the earliest (neither given), ``to_datetime``, or
    ``by_duration`` before ``now_ms`` (Kafka's ``--to-datetime`` and ``--by-duration``)."""
    if to_datetime is not None and by_duration is not None:
        raise ValueError("give to_datetime or by_duration, not both")
    if to_datetime is not None:
        moment = _aware(to_datetime, "to_datetime")
        ms = int(moment.timestamp() * 1000)
        return OffsetTarget(ms, f"the first record at or after {_utc(ms)} (to_datetime {moment.isoformat()})")
    if by_duration is not None:
        duration = parse_duration(by_duration)
        ms = now_ms - int(duration.total_seconds() * 1000)
        return OffsetTarget(ms, f"the first record at or after {_utc(ms)} (now minus {duration})")
    return OffsetTarget(None, "the earliest offset")


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclasses.dataclass(frozen=True)
class OffsetChange:
    """One input partition: its committed offset now (None: never committed) and after."""

    topic: str
    partition: int
    current: int | None
    target: int


@dataclasses.dataclass(frozen=True)
class ResetPlan:
    """What resetting ``application_id`` does; ``refusals`` (live instances, group members)
    stop it. ``executed``: carried out (only ever with no refusal)."""

    application_id: str
    target: OffsetTarget
    offsets: tuple[OffsetChange, ...]
    topics_to_delete: tuple[str, ...]
    state_dirs_to_remove: tuple[str, ...]
    refusals: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    executed: bool = False

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    @property
    def empty(self) -> bool:
        return not (self.offsets or self.topics_to_delete or self.state_dirs_to_remove)

    def to_json_dict(self) -> dict[str, Any]:
        return {"application_id": self.application_id, "executed": self.executed, "refused": list(self.refusals),
                "offsets_to": self.target.text, "timestamp_ms": self.target.timestamp_ms,
                "offsets": [dataclasses.asdict(o) for o in self.offsets],
                "topics_to_delete": list(self.topics_to_delete),
                "state_dirs_to_remove": list(self.state_dirs_to_remove), "notes": list(self.notes)}

    def text(self) -> str:
        """The plan for a person: what was (or would be) done, each step under its heading."""
        app = self.application_id
        if self.refused:
            head = f"REFUSED: reset of application {app!r} changes nothing while it runs"
        elif self.executed:
            head = f"reset of application {app!r}: done"
        else:
            head = f"reset of application {app!r}: DRY RUN, nothing changed (add --execute to carry it out)"
        lines = [head]
        lines += [f"  - {reason}" for reason in self.refusals]
        did = self.executed
        lines.append(f"input offsets of consumer group {app!r} {'set' if did else 'to set'} to {self.target.text}:")
        if self.offsets:
            rows = [("TOPIC", "PARTITION", "CURRENT", "NEW")] + [
                (o.topic, str(o.partition), "-" if o.current is None else str(o.current), str(o.target))
                for o in self.offsets]
            widths = [max(len(row[i]) for row in rows) for i in range(4)]
            lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                      for row in rows]
        else:
            lines.append("  (none: the group has committed no input offsets; give --input-topics to set some)")
        lines.append(f"internal topics {'deleted' if did else 'to delete'} ({len(self.topics_to_delete)}):")
        lines += [f"  {topic}" for topic in self.topics_to_delete] or ["  (none)"]
        lines.append(f"local state {'removed' if did else 'to remove'}:")
        lines += [f"  {path}" for path in self.state_dirs_to_remove] or ["  (none)"]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)
