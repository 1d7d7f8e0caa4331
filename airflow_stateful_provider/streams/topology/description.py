"""TopologyDescription: a topology in the layout of Kafka Streams' ``describe()``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from airflow_stateful_provider.streams.topology.nodes import (
    NodeSpec,
    ProcessorNodeSpec,
    SinkNodeSpec,
    SourceNodeSpec,
    callable_name,
)
from airflow_stateful_provider.streams.topology.subtopologies import Subtopology

__all__ = ["TopologyDescription"]


class TopologyDescription:
    """Readable form of a topology, in the layout of Kafka Streams' ``describe()``."""

    def __init__(self, subtopologies: Sequence[Subtopology], nodes: Mapping[str, NodeSpec],
                 children: Mapping[str, Sequence[str]], stores: Mapping[str, Sequence[str]]) -> None:
        self.subtopologies = list(subtopologies)
        self._nodes = dict(nodes)
        self._children = {name: list(c) for name, c in children.items()}
        self._stores = {name: list(s) for name, s in stores.items()}

    def __str__(self) -> str:
        lines = ["Topologies:"]
        for sub in self.subtopologies:
            lines.append(f"   Sub-topology: {sub.id}")
            for name in sub.nodes:
                spec = self._nodes[name]
                if isinstance(spec, SourceNodeSpec):
                    lines.append(f"    Source: {name} (topics: [{', '.join(spec.topics)}])")
                elif isinstance(spec, ProcessorNodeSpec):
                    lines.append(f"    Processor: {name} (stores: [{', '.join(self._stores.get(name, ()))}])")
                else:
                    topic = spec.topic if isinstance(spec.topic, str) else callable_name(spec.topic)
                    lines.append(f"    Sink: {name} (topic: {topic})")
                children = self._children[name]
                if not isinstance(spec, SinkNodeSpec):
                    lines.append(f"      --> {', '.join(children) if children else 'none'}")
                if spec.parents:
                    lines.append(f"      <-- {', '.join(spec.parents)}")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return str(self)
