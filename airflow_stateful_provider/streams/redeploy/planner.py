"""``plan_topology_change``: the plan of deploying a topology, against what the brokers hold.

The recorded side is the latest record of ``<application_id>-topology``; the new side is the
topology described with the partition counts its source and sink topics have now (so an
input topic that gained partitions shows as a partition change of every store it feeds).
Reads only: nothing is created or written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import BrokerUnreachableError, MissingTopicError
from airflow_stateful_provider.streams.kafka.client_settings import ADMIN, CONSUMER, settings_for
from airflow_stateful_provider.streams.kafka.clients import connection_errors, construct_client, servers_text
from airflow_stateful_provider.streams.redeploy.plan import TopologyPlan, plan_redeploy
from airflow_stateful_provider.streams.redeploy.recorded_topology import describe_topology
from airflow_stateful_provider.streams.redeploy.topology_topic import read_recorded_topology
from airflow_stateful_provider.streams.topics.topic_manager import fetch_partition_counts
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["plan_topology_change"]


def plan_topology_change(topology: Topology, config: StreamsConfig, *,
                         client_configs: Mapping[str, Any] | None = None, timeout_ms: int = 10_000) -> TopologyPlan:
    """The plan of deploying ``topology`` as ``config.application_id`` on ``config.bootstrap_servers``.

    Raises NoRecordedTopologyError when nothing is recorded, MissingTopicError naming the source
    or sink topics that do not exist (the application could not start either),
    BrokerUnreachableError past ``timeout_ms``."""
    app, servers = config.application_id, list(config.bootstrap_servers)
    settings = {**config.client_configs, **(client_configs or {})}
    recorded = read_recorded_topology(servers, app, client_configs=settings_for(CONSUMER, settings),
                                      timeout_ms=timeout_ms)
    counts = _partition_counts(topology, app, servers, settings_for(ADMIN, settings), timeout_ms)
    return plan_redeploy(recorded, describe_topology(topology, config, counts, recorded_at_ms=wall_clock_ms()))


def _partition_counts(topology: Topology, application_id: str, servers: Sequence[str],
                      client_configs: Mapping[str, Any], timeout_ms: int) -> dict[str, int]:
    from kafka.admin import KafkaAdminClient

    external = [t for t in topology.source_topics() if not topology.is_internal_topic(t)]
    sinks = topology.sink_topics()
    try:
        admin = construct_client(KafkaAdminClient, {
            "bootstrap_servers": servers, "client_id": f"{application_id}-plan", "bootstrap_timeout_ms": timeout_ms,
            "request_timeout_ms": max(timeout_ms, 1_000), **client_configs})
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"cannot reach Kafka at {servers_text(servers)} within {timeout_ms} ms to plan "
                                     f"the topology of application {application_id!r}: {exc}") from exc
    try:
        counts = fetch_partition_counts(admin, external + sinks)
    finally:
        admin.close()
    missing = sorted(set(external + sinks) - set(counts))
    if missing:
        raise MissingTopicError(f"topics {missing} of the new topology do not exist on {servers_text(servers)}: "
                                f"create them first (the application could not start without them)", topics=missing)
    return counts
