"""The topic ``<application_id>-topology``: where each instance records its topology at start.

One partition, compacted, keyed by the application id: the latest record is the topology the
application last started with (recorded_topology.py). ``KafkaStreams.start`` creates it with
the changelog and repartition topics (after the same checks, in the same request) and writes
the record before any thread processes; ``stateful-streams plan`` and SubmitTopologyOperator read it; the application
reset deletes it with the other internal topics.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_stateful_provider.streams.errors import (
    BrokerUnreachableError,
    NoRecordedTopologyError,
    StatusReadTimeoutError,
)
from airflow_stateful_provider.streams.kafka.authorization import missing_acl, refusal_in
from airflow_stateful_provider.streams.redeploy.recorded_topology import RecordedTopology
from airflow_stateful_provider.streams.status.reader import open_reader_consumer
from airflow_stateful_provider.streams.topics.internal_topics import InternalTopic

__all__ = ["TOPOLOGY_TOPIC_CONFIG", "read_recorded_topology", "topology_topic", "topology_topic_name",
           "write_recorded_topology"]

#: Only the latest record matters; short segments so that compaction can drop older ones.
TOPOLOGY_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "3600000"}


def topology_topic_name(application_id: str) -> str:
    return f"{application_id}-topology"


def topology_topic(application_id: str) -> InternalTopic:
    """``<application_id>-topology`` as the InternalTopicManager creates it: 1 partition, compacted."""
    return InternalTopic(topology_topic_name(application_id), 1, dict(TOPOLOGY_TOPIC_CONFIG), "topology", -1)


def write_recorded_topology(producer: Any, recorded: RecordedTopology, timeout_s: float = 30.0) -> None:
    """Send ``recorded`` and wait until the brokers have it (at most ``timeout_s``). A refused
    write is an AuthorizationError naming the ACL; no acknowledgement in time, BrokerUnreachableError."""
    from kafka.errors import KafkaError

    topic = topology_topic_name(recorded.application_id)
    try:
        future = producer.send(topic, key=recorded.application_id.encode("utf-8"),
                               value=recorded.to_json().encode("utf-8"))
        producer.flush(timeout=timeout_s)
        future.get(timeout=timeout_s)
    except KafkaError as exc:
        if refusal_in(exc) is not None:
            raise missing_acl("topic", [topic], "Write", doing="recording the topology at start") from exc
        raise BrokerUnreachableError(f"could not record the topology in {topic!r} within {timeout_s:g} s: "
                                     f"{exc}") from exc


def read_recorded_topology(bootstrap_servers: str | Sequence[str], application_id: str, *,
                           client_configs: Mapping[str, Any] | None = None,
                           timeout_ms: int = 10_000) -> RecordedTopology:
    """The topology ``application_id`` last started with. NoRecordedTopologyError when its
    topic is missing or empty; TopologyRecordFormatError for a record this provider cannot
    read; BrokerUnreachableError / StatusReadTimeoutError past ``timeout_ms``."""
    from kafka import TopicPartition

    topic = topology_topic_name(application_id)
    consumer, servers = open_reader_consumer(bootstrap_servers, application_id, timeout_ms, client_configs)
    try:
        if not consumer.partitions_for_topic(topic):
            raise NoRecordedTopologyError(_nothing_recorded(application_id, f"no topic {topic!r} on {servers}"))
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        begin = consumer.beginning_offsets([tp], timeout_ms=timeout_ms)[tp]
        end = consumer.end_offsets([tp], timeout_ms=timeout_ms)[tp]
        consumer.seek(tp, begin)
        latest: bytes | None = None
        deadline = time.monotonic() + timeout_ms / 1000
        while consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise StatusReadTimeoutError(f"reading {topic!r} on {servers}: end offset {end} not reached within "
                                             f"{timeout_ms} ms (at {consumer.position(tp)})")
            for record in consumer.poll(timeout_ms=200).get(tp, []):
                if record.offset < end and record.key == application_id.encode("utf-8"):
                    latest = record.value
        if latest is None:
            raise NoRecordedTopologyError(_nothing_recorded(application_id, f"topic {topic!r} holds no record"))
        return RecordedTopology.from_json(latest, f"the record of {topic!r}")
    finally:
        consumer.close()


def _nothing_recorded(application_id: str, where: str) -> str:
    return (f"no topology recorded for application {application_id!r} ({where}): it never started with a provider "
            f"that records its topology, it was reset, or these are another cluster's brokers; nothing to compare "
            f"with (a first deploy needs no plan)")
