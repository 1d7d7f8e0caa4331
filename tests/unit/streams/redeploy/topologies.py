"""Small topologies for the redeploy tests: one source, one processor holding the given
stores, one sink; described with fixed partition counts (no broker)."""

from __future__ import annotations

from typing import Any

from airflow_stateful_provider.streams import Processor, StreamsConfig, Topology
from airflow_stateful_provider.streams.redeploy.recorded_topology import RecordedTopology, describe_topology

APP = "shop"


class Keep(Processor):
    def process(self, record: Any) -> None:
        self.context.forward(record)


def store_topology(*builders: Any, source: str = "orders", sink: str = "totals") -> Topology:
    topology = Topology().add_source("in", source).add_processor("p", Keep, "in").add_sink("out", sink, "p")
    for builder in builders:
        topology.add_state_store(builder, "p")
    return topology


def described(topology: Topology, partitions: int = 4, **config: Any) -> RecordedTopology:
    counts = {topic: partitions for topic in topology.source_topics() if not topology.is_internal_topic(topic)}
    counts.update({topic: 1 for topic in topology.sink_topics()})
    return describe_topology(topology, StreamsConfig(application_id=APP, bootstrap_servers="localhost:9092",
                                                     **config), counts, recorded_at_ms=1_700_000_000_000)
