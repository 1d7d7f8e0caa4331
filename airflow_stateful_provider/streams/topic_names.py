"""Kafka's rules for topic names, checked before a name reaches the brokers.

A broker refuses an illegal name only when the topic is created, by which time an instance
may already have created others; every name the engine will use (sources, sinks, the
dead-letter topic, the internal topics built from ``application_id``) is checked with these
rules first. The rules are Kafka's ``Topic.validate``: 1 to 249 characters of
``[a-zA-Z0-9._-]``, and not ``.`` or ``..``.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_TOPIC_NAME_LENGTH", "topic_name_problem"]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def topic_name_problem(name: Any) -> str | None:
    """What makes ``name`` an illegal Kafka topic name (for an error message), or None if it is legal."""
    if not isinstance(name, str) or not name:
        return f"a topic name must be a non-empty string, got {name!r}"
    if name in (".", ".."):
        return f"a topic cannot be named {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"topic name {name!r} is {len(name)} characters long; Kafka allows at most {MAX_TOPIC_NAME_LENGTH}"
    if not _LEGAL.match(name):
        illegal = sorted({c for c in name if not _LEGAL.match(c)})
        return f"topic name {name!r} contains {illegal}; Kafka allows only ASCII letters, digits, '.', '_' and '-'"
    return None
