"""Drift between the configs an application's internal topics should have (docs/semantics.md §7)
and what the brokers report.

Kafka Streams sets changelog and repartition topic configs once, at creation, and never
looks again; a hand edit (``retention.ms`` shortened on a session changelog, a changelog
switched to ``delete``) silently loses state on the next restore. This module is pure (no
Kafka client), so the maintenance operator and a CLI compute the same answer:

- :func:`config_drift`: expected topics (exact, from
  :func:`~.internal_topics.internal_topics` and the topology) against described configs
  and partition counts -> a list of :class:`Drift`;
- :func:`infer_internal_topics`: without the topology, what can be inferred from the
  topic names and their current configs, with the findings that have no exact expected
  value and notes on what cannot be checked;
- :func:`repair_plan`: the config changes that fix the repairable drift;
- :func:`drift_table`: the report.

Partition counts are never "repaired": a changelog with another partition count mixes
the state of different tasks, and Kafka cannot shrink a topic; that needs a person.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_stateful_provider.streams.state.common.builder import CHANGELOG_ADDITIONAL_RETENTION_MS
from airflow_stateful_provider.streams.topics.internal_topics import REPARTITION_TOPIC_CONFIG, InternalTopic

__all__ = [
    "Drift",
    "InferredTopics",
    "application_internal_topic_names",
    "config_drift",
    "drift_table",
    "infer_internal_topics",
    "repair_plan",
]

#: Keys whose values are comma-separated lists compared as sets (``compact,delete`` equals
#: ``delete,compact``).
_LIST_KEYS = frozenset({"cleanup.policy"})
_CHANGELOG_SUFFIX = "-changelog"
_REPARTITION_SUFFIX = "-repartition"
_EXTRA_DAY = CHANGELOG_ADDITIONAL_RETENTION_MS


@dataclasses.dataclass(frozen=True)
class Drift:
    """One difference on one topic.

    ``key`` is a topic config key, ``"partitions"`` or ``"topic"`` (the topic is missing).
    ``repairable``: setting ``key`` to ``expected`` fixes it (an exact config value); other
    findings (partition counts, missing topics, values that need the topology) need a person.
    """

    topic: str
    key: str
    expected: str | None
    actual: str | None
    repairable: bool
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class InferredTopics:
    """What :func:`infer_internal_topics` could tell without the topology: ``topics`` with
    the exact configs that follow from the name and current configs, ``findings`` that are
    wrong but have no exact expected value, ``unchecked`` notes on what was not verified."""

    topics: tuple[InternalTopic, ...]
    findings: tuple[Drift, ...]
    unchecked: tuple[str, ...]


def _normalized(key: str, value: str | None) -> Any:
    if value is None:
        return None
    if key in _LIST_KEYS:
        return frozenset(part.strip().lower() for part in str(value).split(",") if part.strip())
    return str(value).strip()


def config_drift(
    expected: Iterable[InternalTopic],
    actual_configs: Mapping[str, Mapping[str, str | None]],
    actual_partitions: Mapping[str, int],
) -> list[Drift]:
    """Every difference between ``expected`` topics and the brokers' view.

    ``actual_configs``: per existing topic, its configs (every key the broker reports, so a
    default counts as the actual value); ``actual_partitions``: partition count per existing
    topic. A topic absent from both is missing. Expected partitions None are not checked.
    Ordered by topic, then "topic", "partitions", then config keys.
    """
    drifts: list[Drift] = []
    for topic in sorted(expected, key=lambda t: t.name):
        if topic.name not in actual_configs and topic.name not in actual_partitions:
            drifts.append(Drift(topic.name, "topic", "exists", None, False,
                                f"{topic.kind} topic missing: the application creates it when it starts"))
            continue
        have = actual_partitions.get(topic.name)
        if topic.partitions is not None and have is not None and have != topic.partitions:
            drifts.append(Drift(
                topic.name, "partitions", str(topic.partitions), str(have), False,
                "partition counts are not repaired: the topic holds data partitioned for another task layout; "
                "stop the application, delete the topic and let it be recreated (state restores from the "
                "source topics only if they still hold it), or fix the source topics"))
        configs = actual_configs.get(topic.name, {})
        for key in sorted(topic.config):
            want, got = topic.config[key], configs.get(key)
            if _normalized(key, want) != _normalized(key, got):
                drifts.append(Drift(topic.name, key, want, got, True,
                                    f"Kafka Streams' {topic.kind} config" + (f" of store {topic.store!r}"
                                                                           if topic.store else "")))
    return drifts


def application_internal_topic_names(application_id: str, topic_names: Iterable[str]) -> list[str]:
    """Changelog and repartition topics named like the application's (``<app>-...-changelog``,
    ``<app>-...-repartition``), leaving out those of another application whose id extends
    this one (``<app>-v2``: recognised by its own ``-status`` or ``-control`` topic)."""
    names = set(topic_names)
    prefix = f"{application_id}-"
    others = sorted({n[: -len(suffix)] for n in names for suffix in ("-status", "-control")
                     if n.endswith(suffix) and n.startswith(prefix) and len(n) > len(prefix) + len(suffix)},
                    key=len, reverse=True)
    out = []
    for name in sorted(names):
        if not name.startswith(prefix) or not name.endswith((_CHANGELOG_SUFFIX, _REPARTITION_SUFFIX)):
            continue
        if any(name.startswith(f"{other}-") for other in others):
            continue
        out.append(name)
    return out


def _int(value: str | None) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def infer_internal_topics(
    application_id: str,
    actual_configs: Mapping[str, Mapping[str, str | None]],
    actual_partitions: Mapping[str, int] | None = None,
) -> InferredTopics:
    """Expected configs of the application's internal topics inferred from their names and
    current configs (no topology).

    Repartition topics: exactly Kafka Streams' repartition configs. Changelogs: always
    ``message.timestamp.type=CreateTime``; ``compact,delete`` means a session store whose
    ``retention.ms`` must exceed one day (store retention + 86400000; the retention itself is
    unknown); ``compact`` means a key-value store, or a versioned one when
    ``min.compaction.lag.ms`` >= one day; any other policy is wrong but its fix depends on the
    store type. Partition counts and user overrides (``with_logging_enabled(config)``) need the
    topology and are not checked.
    """
    partitions = actual_partitions or {}
    topics: list[InternalTopic] = []
    findings: list[Drift] = []
    unchecked: list[str] = []
    for name in application_internal_topic_names(application_id, set(actual_configs) | set(partitions)):
        configs = actual_configs.get(name, {})
        if name.endswith(_REPARTITION_SUFFIX):
            topics.append(InternalTopic(name, None, dict(REPARTITION_TOPIC_CONFIG), "repartition", -1))
            continue
        store = name[len(application_id) + 1: -len(_CHANGELOG_SUFFIX)]
        policy = _normalized("cleanup.policy", configs.get("cleanup.policy")) or frozenset()
        expected = {"message.timestamp.type": "CreateTime"}
        if policy == {"compact", "delete"}:
            retention = _int(configs.get("retention.ms"))
            if retention is None or retention <= _EXTRA_DAY:
                findings.append(Drift(
                    name, "retention.ms", f"> {_EXTRA_DAY} (store retention + {_EXTRA_DAY})",
                    configs.get("retention.ms"), False,
                    "a session changelog keeps the store's retention plus one day; the exact value needs the "
                    "topology (pass topology to check and repair it)"))
            else:
                unchecked.append(f"{name}: session changelog, retention.ms {retention} (store retention "
                                 f"{retention - _EXTRA_DAY} ms) not checked against the topology")
        elif policy == {"compact"}:
            lag = _int(configs.get("min.compaction.lag.ms"))
            if lag is not None and lag >= _EXTRA_DAY:
                unchecked.append(f"{name}: versioned changelog, min.compaction.lag.ms {lag} (history retention "
                                 f"{lag - _EXTRA_DAY} ms) not checked against the topology")
            elif lag:
                findings.append(Drift(
                    name, "min.compaction.lag.ms", f">= {_EXTRA_DAY} (versioned: history retention + {_EXTRA_DAY}) "
                    f"or 0 (key-value)", configs.get("min.compaction.lag.ms"), False,
                    "neither a key-value nor a versioned changelog; pass topology to repair it"))
            else:
                unchecked.append(f"{name}: taken for a key-value changelog (a versioned store's changelog whose "
                                 f"min.compaction.lag.ms was reset looks the same; pass topology to tell)")
        else:
            findings.append(Drift(
                name, "cleanup.policy", "compact (key-value, versioned) or compact,delete (session)",
                configs.get("cleanup.policy"), False,
                f"changelog of store {store!r} is not compacted: restoring it loses state; the right value "
                f"depends on the store type (pass topology to repair it)"))
        topics.append(InternalTopic(name, None, expected, "changelog", -1, store))
    if topics or findings:
        unchecked.append("partition counts and changelog config overrides of the topology are not checked "
                         "without topology")
    return InferredTopics(tuple(topics), tuple(findings), tuple(unchecked))


def repair_plan(drifts: Iterable[Drift]) -> dict[str, dict[str, str]]:
    """Per topic, the config values that fix its repairable drift."""
    plan: dict[str, dict[str, str]] = {}
    for drift in drifts:
        if drift.repairable and drift.expected is not None:
            plan.setdefault(drift.topic, {})[drift.key] = drift.expected
    return plan


def drift_table(drifts: Iterable[Drift]) -> str:
    """The drift as a fixed-width table (TOPIC KEY EXPECTED ACTUAL ACTION), or a line saying
    there is none."""
    rows = [(d.topic, d.key, "-" if d.expected is None else d.expected, "-" if d.actual is None else d.actual,
             "repair" if d.repairable else "manual") for d in drifts]
    if not rows:
        return "no drift"
    header = ("TOPIC", "KEY", "EXPECTED", "ACTUAL", "ACTION")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    reasons = [f"- {d.topic} {d.key}: {d.reason}" for d in drifts if not d.repairable and d.reason]
    return "\n".join(lines + reasons)
