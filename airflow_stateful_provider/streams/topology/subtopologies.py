"""Subtopologies: the connected components of a topology, the units that become tasks.

Two nodes are in one subtopology when one is the other's parent or they share a store.
Subtopology ``s`` runs as tasks ``TaskId(s, p)``, one per partition ``p`` of its
(co-partitioned) source topics. Numbering follows Kafka Streams (``makeNodeGroups``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence

from airflow_stateful_provider.streams.errors import TopologyError
from airflow_stateful_provider.streams.topology.nodes import NodeSpec, SinkNodeSpec, SourceNodeSpec

__all__ = ["Subtopology", "compute_subtopologies", "topological_order"]


@dataclasses.dataclass(frozen=True)
class Subtopology:
    """One connected component: the unit that becomes tasks."""

    id: int
    #: Node names in topological order (parents before children; sources first).
    nodes: tuple[str, ...]
    #: Raw (undecorated) names of the topics its sources read.
    source_topics: tuple[str, ...]
    #: Raw names of the fixed topics its sinks write (extractor sinks are not listed).
    sink_topics: tuple[str, ...]
    store_names: tuple[str, ...]
    #: The subset of ``source_topics`` that are internal repartition topics.
    repartition_source_topics: tuple[str, ...]


def compute_subtopologies(nodes: Mapping[str, NodeSpec], store_users: Mapping[str, Sequence[str]],
                          node_stores: Mapping[str, Sequence[str]],
                          internal_topics: Collection[str]) -> list[Subtopology]:
    """The connected components of the node graph (a store shared by processors connects them
    too), numbered in the order their first node was added."""
    parent_of: dict[str, str] = {n: n for n in nodes}

    def find(x: str) -> str:
        while parent_of[x] != x:
            parent_of[x] = parent_of[parent_of[x]]
            x = parent_of[x]
        return x

    def unite(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent_of[rb] = ra

    for node in nodes.values():
        for p in node.parents:
            unite(node.name, p)
    for users in store_users.values():
        for other in users[1:]:
            unite(users[0], other)

    # Numbered in the order the components' first nodes were added (Kafka Streams'
    # makeNodeGroups walks its nodes in insertion order).
    roots: dict[str, int] = {}
    for name in nodes:
        root = find(name)
        if root not in roots:
            roots[root] = len(roots)
    members: dict[int, list[str]] = {i: [] for i in roots.values()}
    for name in nodes:
        root = find(name)
        if root not in roots:  # pragma: no cover - every node descends from a source
            raise TopologyError(f"node {name!r} is not reachable from any source")
        members[roots[root]].append(name)

    subs = []
    for sub_id in sorted(members):
        names = members[sub_id]
        order = topological_order(nodes, names)
        sources = [spec for n in order if isinstance(spec := nodes[n], SourceNodeSpec)]
        topics = tuple(t for s in sources for t in s.topics)
        sinks = tuple(
            dict.fromkeys(
                spec.topic
                for n in order
                if isinstance(spec := nodes[n], SinkNodeSpec) and isinstance(spec.topic, str)
            )
        )
        stores = tuple(s for n in order for s in node_stores.get(n, ()))
        subs.append(
            Subtopology(
                id=sub_id,
                nodes=tuple(order),
                source_topics=topics,
                sink_topics=sinks,
                store_names=tuple(dict.fromkeys(stores)),
                repartition_source_topics=tuple(t for t in topics if t in internal_topics),
            )
        )
    return subs



def topological_order(nodes: Mapping[str, NodeSpec], names: Iterable[str]) -> list[str]:
    """Depth (longest distance from a source) first, then insertion order."""
    wanted = list(names)
    depth: dict[str, int] = {}
    for name in nodes:  # insertion order is a topological order
        if name in wanted:
            parents = nodes[name].parents
            depth[name] = 1 + max((depth[p] for p in parents), default=-1)
    index = {n: i for i, n in enumerate(nodes)}
    return sorted(wanted, key=lambda n: (depth[n], index[n]))
