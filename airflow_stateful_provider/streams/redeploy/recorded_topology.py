"""RecordedTopology: what a topology means for the state it leaves behind, as the instances
record it in ``<application_id>-topology`` at start and a redeploy compares it (plan.py).

Kafka Streams' ``describe()`` (topology/description.py) shows the graph of nodes; this
records what outlives a deploy: per store its kind, serdes (by identity, the application's
defaults resolved), changelog topic, partition count, window type and time settings; the
source, sink and repartition topics with their partition counts.

The format is JSON with a ``format_version``. A reader reads every version up to its own
(``FORMAT_VERSION``) and ignores fields it does not know, so a later version may add fields
under the same number; a change of meaning takes a new number and a conversion in
:meth:`RecordedTopology.from_json`. A record of a newer version is refused, naming both.
Pure: no Kafka client.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from airflow_stateful_provider import __version__
from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import TopologyRecordFormatError
from airflow_stateful_provider.streams.serdes import serde_name
from airflow_stateful_provider.streams.topics.internal_topics import internal_topics
from airflow_stateful_provider.streams.topology.nodes import SinkNodeSpec, SourceNodeSpec
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["FORMAT_VERSION", "RecordedTopology", "StoreDescription", "TopicDescription", "describe_topology"]

#: The version this provider writes, and the newest it reads.
FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class StoreDescription:
    """One state store, as its data depends on it.

    ``settings``: the kind's time parameters (``retention_ms``, ``inactivity_gap_ms``, ...;
    StoreBuilder.settings). ``fixed_settings``: those a store directory records and refuses to
    be opened with another value (the kind's required metadata), so the data cannot follow a
    change of them. ``changelog_topic`` None: logging disabled."""

    name: str
    kind: str
    persistent: bool
    key_serde: str
    value_serde: str
    changelog_topic: str | None
    partitions: int
    subtopology: int
    window_type: str | None = None
    settings: Mapping[str, int | None] = dataclasses.field(default_factory=dict)
    fixed_settings: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class TopicDescription:
    """A source, sink or repartition topic; serdes None where the topic has none of its own
    (repartition topics carry what their writer serializes)."""

    topic: str
    partitions: int | None
    key_serde: str | None = None
    value_serde: str | None = None


@dataclasses.dataclass(frozen=True)
class RecordedTopology:
    """The description of one application's topology (see module docstring)."""

    application_id: str
    stores: tuple[StoreDescription, ...]
    sources: tuple[TopicDescription, ...]
    sinks: tuple[TopicDescription, ...]
    repartition_topics: tuple[TopicDescription, ...]
    recorded_at_ms: int | None = None
    recorded_by: str = f"airflow-stateful-provider {__version__}"
    format_version: int = FORMAT_VERSION

    def store(self, name: str) -> StoreDescription | None:
        return next((s for s in self.stores if s.name == name), None)

    def to_json_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_json_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "the topology record") -> RecordedTopology:
        """Read a record of any version up to FORMAT_VERSION; TopologyRecordFormatError naming
        ``source`` and what is wrong otherwise."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise TopologyRecordFormatError(f"{source} is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise TopologyRecordFormatError(f"{source} must be a JSON object, got {type(doc).__name__}")
        version = doc.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise TopologyRecordFormatError(f"{source} has no valid format_version (got {version!r})")
        if version > FORMAT_VERSION:
            raise TopologyRecordFormatError(f"{source} has format_version {version}, written by a newer provider "
                                    f"({doc.get('recorded_by', 'unknown')}); this one reads up to {FORMAT_VERSION}: "
                                    f"upgrade airflow-stateful-provider where the plan runs")
        try:
            return cls(
                application_id=str(doc["application_id"]),
                stores=tuple(_known(StoreDescription, s, fixed_settings=tuple(s.get("fixed_settings") or ()))
                             for s in doc["stores"]),
                sources=tuple(_known(TopicDescription, t) for t in doc["sources"]),
                sinks=tuple(_known(TopicDescription, t) for t in doc["sinks"]),
                repartition_topics=tuple(_known(TopicDescription, t) for t in doc["repartition_topics"]),
                recorded_at_ms=doc.get("recorded_at_ms"), recorded_by=str(doc.get("recorded_by", "unknown")),
                format_version=version)
        except (KeyError, TypeError, AttributeError) as exc:
            raise TopologyRecordFormatError(f"{source} (format_version {version}) is incomplete or malformed: "
                                    f"{type(exc).__name__}: {exc}") from None


def _known(cls: type[Any], values: Mapping[str, Any], **overrides: Any) -> Any:
    """``cls`` from the fields of ``values`` it knows (a later version's additions are ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{**{k: v for k, v in values.items() if k in names}, **overrides})


def describe_topology(topology: Topology, config: StreamsConfig, partition_counts: Mapping[str, int],
                      *, recorded_at_ms: int | None = None) -> RecordedTopology:
    """The description of ``topology`` run as ``config.application_id``, given the partition
    counts of its source and sink topics (as fetched from the brokers). Serdes left to the
    application's defaults are recorded as the defaults ``config`` names; a store's
    persistence as ``config.default_dsl_store`` decides it when its builder does not."""
    app = config.application_id
    tasks = topology.validate_partition_counts(partition_counts, app)
    topics = internal_topics(topology, app, partition_counts)
    changelogs = {t.store: t.name for t in topics if t.kind == "changelog"}
    stores = []
    for sub in topology.subtopologies():
        for name in sub.store_names:
            builder = topology.store_builder(name)
            kind = builder.kind
            persistent = builder.persistent if builder.persistent is not None \
                else config.default_dsl_store == "rocksdb"
            stores.append(StoreDescription(
                name=name, kind=kind.name, persistent=bool(persistent),
                key_serde=_serde(builder.key_serde, config.default_key_serde),
                value_serde=_serde(builder.value_serde, config.default_value_serde),
                changelog_topic=changelogs.get(name), partitions=tasks[sub.id], subtopology=sub.id,
                window_type=builder.window_type, settings=builder.settings(),
                fixed_settings=tuple(sorted(kind.metadata.required))))
    sources, sinks = [], []
    for node_name in topology.node_names:
        node = topology.node(node_name)
        if isinstance(node, SourceNodeSpec):
            for raw in node.topics:
                if not topology.is_internal_topic(raw):
                    sources.append(TopicDescription(raw, partition_counts.get(raw),
                                                    _serde(node.key_serde, config.default_key_serde),
                                                    _serde(node.value_serde, config.default_value_serde)))
        elif isinstance(node, SinkNodeSpec) and isinstance(node.topic, str) \
                and not topology.is_internal_topic(node.topic):
            sinks.append(TopicDescription(node.topic, partition_counts.get(node.topic),
                                          _serde(node.key_serde, config.default_key_serde),
                                          _serde(node.value_serde, config.default_value_serde)))
    sinks = list({t.topic: t for t in sinks}.values())  # two sink nodes may write one topic
    repartition = [TopicDescription(t.name, t.partitions) for t in topics if t.kind == "repartition"]
    return RecordedTopology(app, tuple(sorted(stores, key=lambda s: s.name)),
                            tuple(sorted(sources, key=lambda t: t.topic)), tuple(sorted(sinks, key=lambda t: t.topic)),
                            tuple(sorted(repartition, key=lambda t: t.topic)), recorded_at_ms=recorded_at_ms)


def _serde(serde: Any, default: Any) -> str:
    return serde_name(default if serde is None else serde)
