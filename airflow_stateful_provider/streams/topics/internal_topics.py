"""The internal topics an application needs, computed from its topology (docs/semantics.md §7).

The runtime creates them at start (Kafka Streams does it once, at creation; the
maintenance operators use the same functions to detect and repair drift):

- one changelog per logged store: ``<application_id>-<store>-changelog``, partitions =
  the partitions of the subtopology owning the store, configs by store type;
- one topic per repartition step: ``<application_id>-<name>-repartition``, partitions
  = the maximum partition count of the subtopology writing it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from airflow_stateful_provider.streams.topology.store_builders import changelog_topic_name
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["InternalTopic", "changelog_topic_configs", "internal_topics", "repartition_topic_configs"]

#: Kafka Streams' repartition topic defaults (RepartitionTopicConfig). Records are purged
#: by the application after commit, so no time retention.
REPARTITION_TOPIC_CONFIG = {
    "cleanup.policy": "delete",
    "segment.bytes": "52428800",
    "retention.ms": "-1",
    "message.timestamp.type": "CreateTime",
}


@dataclasses.dataclass(frozen=True)
class InternalTopic:
    """A topic the application owns: name, partition count (None until the source
    partition counts are known), topic configs, and what it serves."""

    name: str
    partitions: int | None
    config: dict[str, str]
    kind: str  # "changelog" | "repartition"
    subtopology: int
    store: str | None = None


def changelog_topic_configs(
    topology: Topology,
    application_id: str,
    partition_counts: Mapping[str, int] | None = None,
) -> dict[str, InternalTopic]:
    """Per logged store: its changelog topic (name, partitions, docs/semantics.md §7 configs).

    ``partition_counts`` maps source topic names (decorated) to partition counts; without
    it the partitions are None. Example: application "app", session store "s" with gap
    5 min and grace 1 min -> ``app-s-changelog``, ``cleanup.policy=compact,delete``,
    ``retention.ms=86760000``.
    """
    per_sub = topology.validate_partition_counts(partition_counts, application_id) if partition_counts else {}
    out: dict[str, InternalTopic] = {}
    for sub in topology.subtopologies():
        for store in sub.store_names:
            builder = topology.store_builder(store)
            if not getattr(builder, "logging_enabled", True):
                continue
            config_fn = getattr(builder, "changelog_config", None)
            config = dict(config_fn()) if config_fn is not None else {
                "cleanup.policy": "compact", "message.timestamp.type": "CreateTime"}
            out[store] = InternalTopic(
                changelog_topic_name(application_id, store), per_sub.get(sub.id), config, "changelog", sub.id, store
            )
    return out


def repartition_topic_configs(
    topology: Topology,
    application_id: str,
    partition_counts: Mapping[str, int] | None = None,
) -> dict[str, InternalTopic]:
    """Per repartition topic (decorated name): partitions and configs."""
    counts = topology.resolve_partition_counts(partition_counts, application_id) if partition_counts else {}
    out: dict[str, InternalTopic] = {}
    for sub in topology.subtopologies():
        for raw in sub.repartition_source_topics:
            name = topology.decorate_topic(raw, application_id)
            out[name] = InternalTopic(name, counts.get(name), dict(REPARTITION_TOPIC_CONFIG), "repartition", sub.id)
    return out


def internal_topics(
    topology: Topology, application_id: str, partition_counts: Mapping[str, int] | None = None
) -> list[InternalTopic]:
    """Every internal topic (repartition topics first: changelog partitions depend on them)."""
    return [
        *repartition_topic_configs(topology, application_id, partition_counts).values(),
        *changelog_topic_configs(topology, application_id, partition_counts).values(),
    ]
