"""The nodes of a topology as specs: sources, processors and sinks, before any task runs them.

Also the checks every node and topic name goes through, so a typo fails when the topology
is built, naming the bad value.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.processor import ProcessorSupplier
from airflow_stateful_provider.streams.topic_names import topic_name_problem

__all__ = [
    "NODE_NAME",
    "NodeSpec",
    "ProcessorNodeSpec",
    "SinkNodeSpec",
    "SourceNodeSpec",
    "TopicNameExtractor",
    "callable_name",
    "check_topic",
    "node_kind",
]

#: A valid node name.
NODE_NAME = re.compile(r"^\S+$")


#: Chooses a sink's topic per record: (key, value, record_context) -> topic.
TopicNameExtractor = Callable[[Any, Any, Any], str]


@dataclasses.dataclass(frozen=True)
class SourceNodeSpec:
    """Reads ``topics``; serdes None means the config's default serdes."""

    name: str
    topics: tuple[str, ...]
    key_serde: Any = None
    value_serde: Any = None

    @property
    def parents(self) -> tuple[str, ...]:
        return ()


@dataclasses.dataclass(frozen=True)
class ProcessorNodeSpec:
    name: str
    supplier: ProcessorSupplier
    parents: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class SinkNodeSpec:
    """Writes to ``topic`` (a name or a TopicNameExtractor). ``partitioner(topic, key, value,
    num_partitions) -> partition | None`` overrides the default (hash of the key bytes)."""

    name: str
    topic: str | TopicNameExtractor
    parents: tuple[str, ...]
    key_serde: Any = None
    value_serde: Any = None
    partitioner: Callable[..., int | None] | None = None


NodeSpec = SourceNodeSpec | ProcessorNodeSpec | SinkNodeSpec


def node_kind(node: NodeSpec) -> str:
    if isinstance(node, SourceNodeSpec):
        return "source"
    if isinstance(node, SinkNodeSpec):
        return "sink"
    return "processor"


def callable_name(fn: Any) -> str:
    return f"<extractor {getattr(fn, '__qualname__', type(fn).__name__)}>"


def check_topic(topic: Any, owner: str) -> None:
    problem = topic_name_problem(topic)
    if problem is not None:
        raise TopologyError(f"{owner}: {problem}")
