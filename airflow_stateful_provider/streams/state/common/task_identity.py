"""The identity file of a task directory: whose state the directory holds.

Every task directory with persistent stores holds ``task-identity.json`` next to its
``.checkpoint``. It names the application, the task and, per persistent store, the
changelog topic the store is logged to (null for a store without logging)::

    {"format_version": 1, "application_id": "clicks", "task_id": "0_1",
     "stores": {"click-sessions": "clicks-click-sessions-changelog", "dedup": null}}

The runtime compares it with what the topology expects before it trusts the directory
(processing/task_directories.py), so a directory copied from another application or another
task is refused instead of being counted on. This module is only the file: parse, write.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from airflow_stateful_provider.streams.errors import ForeignStateError

__all__ = ["IDENTITY_FILE_NAME", "IDENTITY_FORMAT_VERSION", "TaskIdentity", "read_identity", "write_identity"]

IDENTITY_FILE_NAME = "task-identity.json"
#: Version written by this code; readers refuse any other.
IDENTITY_FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class TaskIdentity:
    """Whose state a task directory holds: application, task, store -> changelog topic."""

    application_id: str
    task_id: str
    stores: Mapping[str, str | None]

    def describe(self) -> str:
        """``application 'clicks', task 0_1 (store 'counts' logged to clicks-counts-changelog)``."""
        stores = ", ".join(f"store {name!r} " + (f"logged to {topic}" if topic else "without changelog")
                           for name, topic in sorted(self.stores.items()))
        return f"application {self.application_id!r}, task {self.task_id}" + (f" ({stores})" if stores else "")

    def to_json(self) -> str:
        return json.dumps({"format_version": IDENTITY_FORMAT_VERSION, "application_id": self.application_id,
                           "task_id": self.task_id, "stores": dict(sorted(self.stores.items()))}, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str) -> TaskIdentity:
        """Parse strictly; any problem is a ForeignStateError naming ``source`` (a directory
        whose owner cannot be told is not trusted either)."""
        def bad(problem: str) -> ForeignStateError:
            return ForeignStateError(f"{source}: {problem}")

        try:
            doc: Any = json.loads(text)
        except ValueError as exc:
            raise bad(f"not valid JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise bad(f"must hold a JSON object, got {type(doc).__name__}")
        if doc.get("format_version") != IDENTITY_FORMAT_VERSION:
            raise bad(f"format_version {doc.get('format_version')!r} is not {IDENTITY_FORMAT_VERSION}")
        for field in ("application_id", "task_id"):
            if not isinstance(doc.get(field), str) or not doc[field]:
                raise bad(f"field {field!r} must be a non-empty string, got {doc.get(field)!r}")
        stores = doc.get("stores")
        if not isinstance(stores, dict) or not all(
                isinstance(name, str) and (topic is None or isinstance(topic, str) and topic)
                for name, topic in stores.items()):
            raise bad(f"field 'stores' must map store names to changelog topics (or null), got {stores!r}")
        return cls(doc["application_id"], doc["task_id"], dict(stores))


def read_identity(task_dir: str | os.PathLike[str]) -> TaskIdentity | None:
    """The identity of ``task_dir``; None when it has no identity file (a directory written by
    an earlier build, or not a task directory yet)."""
    path = os.path.join(os.fspath(task_dir), IDENTITY_FILE_NAME)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ForeignStateError(f"cannot read {path}: {exc}") from exc
    return TaskIdentity.from_json(text, path)


def write_identity(task_dir: str | os.PathLike[str], identity: TaskIdentity) -> None:
    """Write ``identity`` into ``task_dir`` atomically (temp file, fsync, rename)."""
    path = os.path.join(os.fspath(task_dir), IDENTITY_FILE_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(identity.to_json())
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
