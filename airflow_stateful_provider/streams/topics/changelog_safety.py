"""Whether an existing changelog topic can hold its store's data (docs/semantics.md §7).

A changelog is the store's only durable copy: a restore replays it. One created by hand
before the application (or edited since) with ``cleanup.policy=delete``, or with a
``retention.ms`` shorter than the store keeps its data, loses keys on the broker, and the next
restore silently rebuilds a store without them. ``start()`` refuses such a topic before it
creates anything (instance/preflight.py); the ChangelogConfigOperator repairs it.

Pure: the broker's described configs in, the findings out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from airflow_stateful_provider.streams.topics.internal_topics import InternalTopic

__all__ = ["UnsafeSetting", "unsafe_changelog_settings"]


@dataclasses.dataclass(frozen=True)
class UnsafeSetting:
    """One topic config of an existing changelog that loses the store's data: its ``key``, the
    ``actual`` value, the ``repair`` value (None: no single value; the policy fix makes it moot)
    and ``why`` in words."""

    key: str
    actual: str | None
    repair: str | None
    why: str

    def text(self) -> str:
        return f"{self.key}={self.actual} ({self.why})"


def _policy(value: str | None) -> frozenset[str]:
    return frozenset(part.strip().lower() for part in (value or "").split(",") if part.strip())


def _int(value: str | None) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def unsafe_changelog_settings(topic: InternalTopic, actual: Mapping[str, str | None]) -> list[UnsafeSetting]:
    """The settings of ``topic``'s existing configs (``actual``: every key the broker reports)
    that cannot hold the store's data, given the configs the store needs (``topic.config``).

    - ``cleanup.policy`` must include ``compact``: without it the broker drops a key's only
      record once it is older than ``retention.ms``.
    - With ``delete`` in the actual policy, ``retention.ms`` must be -1 (no time limit) for a
      store that keeps keys forever (key-value, versioned: the needed policy is ``compact``
      alone), and at least the needed ``retention.ms`` for a store that keeps data for a time
      (session and window stores: their retention plus a day).
    """
    needed_policy = _policy(topic.config.get("cleanup.policy", "compact"))
    policy = _policy(actual.get("cleanup.policy"))
    found: list[UnsafeSetting] = []
    if "compact" not in policy:
        found.append(UnsafeSetting(
            "cleanup.policy", actual.get("cleanup.policy"), topic.config.get("cleanup.policy", "compact"),
            "not compacted: the broker deletes a key's only record after retention.ms, and a restore loses the key"))
    if "delete" in policy:
        retention = _int(actual.get("retention.ms"))
        if "delete" in needed_policy:
            needed = _int(topic.config.get("retention.ms"))
            if needed is not None and needed != -1 and retention is not None and retention != -1 \
                    and retention < needed:
                found.append(UnsafeSetting(
                    "retention.ms", actual.get("retention.ms"), str(needed),
                    f"shorter than the store keeps its data: it needs at least {needed} ms (the store's "
                    f"retention plus a day)"))
        elif retention is not None and retention != -1:
            found.append(UnsafeSetting(
                "retention.ms", actual.get("retention.ms"), None,
                "with delete in cleanup.policy the broker drops records older than this, but the store keeps "
                "its keys forever (needs cleanup.policy=compact, or retention.ms=-1)"))
    return found
