"""Reading the status topic: every instance's latest document, and the application snapshot.

:func:`read_status_documents` reads the compacted topic from its beginning to the end offset
captured at the start (manual assignment, no consumer group, so readers leave no trace on
the cluster); :func:`fetch_application_status` adds live changelog end offsets and returns
the typed snapshot. Every broker interaction is bounded: an unreachable broker fails within
``timeout_ms`` naming the servers tried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.durations import duration_arg_ms
from airflow_stateful_provider.streams.errors import (
    BrokerUnreachableError,
    StatusFormatError,
    StatusReadTimeoutError,
    UnknownApplicationError,
)
from airflow_stateful_provider.streams.kafka.authorization import missing_acl, refusal_in
from airflow_stateful_provider.streams.kafka.clients import connection_errors, construct_client, servers_text
from airflow_stateful_provider.streams.status.application import ApplicationStatus, build_application_status
from airflow_stateful_provider.streams.status.document import (
    DEFAULT_STALE_AFTER_MS,
    InstanceStatus,
    control_topic_name,
    status_topic_name,
)
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = [
    "DEFAULT_READ_TIMEOUT_MS",
    "ConsumerFactory",
    "fetch_application_status",
    "list_applications",
    "open_reader_consumer",
    "read_status_documents",
]

log = logging.getLogger(__name__)

#: Default bound for a reader's broker interactions.
DEFAULT_READ_TIMEOUT_MS = 10_000

#: ``factory(**consumer_config_overrides) -> KafkaConsumer`` (e.g. ``KafkaStreams._new_consumer``
#: or ``functools.partial(KafkaConsumer, bootstrap_servers=..., security_protocol=...)``).
ConsumerFactory = Callable[..., Any]


def open_reader_consumer(source: str | Sequence[str] | ConsumerFactory, application_id: str, timeout_ms: int,
                   client_configs: Mapping[str, Any] | None) -> tuple[Any, str]:
    """A group-less consumer for reading; returns it and the servers text for errors."""
    overrides = {"group_id": None, "enable_auto_commit": False, "auto_offset_reset": "earliest",
                 "allow_auto_create_topics": False, "client_id": f"{application_id}-status-reader",
                 "bootstrap_timeout_ms": timeout_ms, "request_timeout_ms": max(timeout_ms, 1_000),
                 "fetch_max_wait_ms": 100}
    if callable(source):
        factory = source
        servers = str(getattr(source, "bootstrap_servers", None) or "the brokers of the consumer factory")
    else:
        from kafka import KafkaConsumer

        servers = servers_text(source)

        def factory(**extra: Any) -> Any:
            return construct_client(KafkaConsumer, {"bootstrap_servers": source, **extra, **(client_configs or {})})
    try:
        return factory(**overrides), servers
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"cannot reach Kafka at {servers} within {timeout_ms} ms "
                                     f"(reading the status of application {application_id!r}): {exc}") from exc


def read_status_documents(
    source: str | Sequence[str] | ConsumerFactory,
    application_id: str,
    timeout_ms: int | timedelta = DEFAULT_READ_TIMEOUT_MS,
    *,
    client_configs: Mapping[str, Any] | None = None,
    allow_empty: bool = False,
) -> dict[str, InstanceStatus]:
    """The latest document of every instance, by instance id.

    ``source``: bootstrap servers, or a consumer factory (called with keyword overrides,
    returns a KafkaConsumer). Reads from the beginning to the end offset captured at the
    start; the last record per key wins and tombstones remove. Raises
    UnknownApplicationError when the topic is missing or holds no live document (unless
    ``allow_empty``), BrokerUnreachableError / StatusReadTimeoutError past ``timeout_ms``,
    StatusFormatError for a malformed document.
    """
    timeout = duration_arg_ms(timeout_ms, "timeout_ms", minimum=1)
    consumer, servers = open_reader_consumer(source, application_id, timeout, client_configs)
    try:
        return _read_documents(consumer, servers, application_id, timeout, allow_empty)
    finally:
        consumer.close()


def _read_documents(consumer: Any, servers: str, application_id: str, timeout_ms: int,
                    allow_empty: bool) -> dict[str, InstanceStatus]:
    from kafka import TopicPartition as KafkaTopicPartition

    topic = status_topic_name(application_id)
    deadline = time.monotonic() + timeout_ms / 1000
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise UnknownApplicationError(
                f"unknown application {application_id!r}: no status topic {topic!r} on {servers} (never started, "
                f"another cluster, or hidden from this client's principal: reading it needs the ACL Read on topic "
                f"{topic!r})")
        tps = [KafkaTopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        begins = consumer.beginning_offsets(tps, timeout_ms=timeout_ms)
        ends = consumer.end_offsets(tps, timeout_ms=timeout_ms)
        pending = {tp for tp in tps if ends[tp] > begins[tp]}
        for tp in tps:
            consumer.seek(tp, begins[tp])
        latest: dict[str, bytes | None] = {}
        while pending:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise StatusReadTimeoutError(
                    f"reading {topic!r} on {servers}: end offsets {[ends[tp] for tp in sorted(pending)]} not reached "
                    f"within {timeout_ms} ms (at {[consumer.position(tp) for tp in sorted(pending)]})")
            for tp, records in consumer.poll(timeout_ms=min(left_ms, 200), max_records=5_000).items():
                for record in records:
                    if record.offset >= ends[tp]:
                        continue
                    if record.key is None:
                        log.warning("%s offset %d: status record without a key ignored", topic, record.offset)
                        continue
                    try:
                        key = record.key.decode("utf-8")
                    except UnicodeDecodeError:
                        raise StatusFormatError(f"{topic} offset {record.offset}: record key {record.key!r} is not "
                                                f"UTF-8 (expected an instance id)") from None
                    latest[key] = record.value
            for tp in list(pending):
                if consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"lost Kafka at {servers} while reading {topic!r}: {exc}") from exc
    except Exception as exc:
        if refusal_in(exc) is None:
            raise
        raise missing_acl("topic", [topic], "Read", doing=f"reading the status of application {application_id!r}") \
            from None
    documents: dict[str, InstanceStatus] = {}
    for key, value in sorted(latest.items()):
        if value is None:
            continue
        document = InstanceStatus.from_json_bytes(value, key=key)
        if document.application_id != application_id:
            raise StatusFormatError(f"status document of instance {key!r} in {topic!r}: field 'application_id' is "
                                    f"{document.application_id!r}, expected {application_id!r}")
        documents[key] = document
    if not documents and not allow_empty:
        why = ("the topic is empty (no instance has published yet)" if not latest else
               "every instance removed its document (all shut down cleanly)")
        raise UnknownApplicationError(f"application {application_id!r} has no live status documents in {topic!r} "
                                      f"on {servers}: {why}")
    return documents


def _live_end_offsets(consumer: Any, partitions: Iterable[tuple[str, int]],
                      timeout_ms: int) -> dict[tuple[str, int], int]:
    """End offsets of the changelog partitions that exist; missing ones are left out (the
    snapshot then falls back to reported ends and says so)."""
    from kafka import TopicPartition as KafkaTopicPartition

    wanted: list[Any] = []
    for topic in sorted({t for t, _ in partitions}):
        present = consumer.partitions_for_topic(topic) or set()
        wanted += [KafkaTopicPartition(t, p) for t, p in sorted(partitions) if t == topic and p in present]
    if not wanted:
        return {}
    try:
        ends = consumer.end_offsets(wanted, timeout_ms=timeout_ms)
    except connection_errors() as exc:
        log.warning("live end offsets of %d changelog partitions unavailable (%r); standby lags use reported ends",
                    len(wanted), exc)
        return {}
    except Exception as exc:
        if refusal_in(exc) is None:
            raise
        raise missing_acl("topic", {tp.topic for tp in wanted}, "Describe",
                          doing="fetching the end offsets of the changelogs (standby lag)") from None
    return {(tp.topic, tp.partition): offset for tp, offset in ends.items()}


def fetch_application_status(
    bootstrap_servers: str | Sequence[str] | ConsumerFactory,
    application_id: str,
    *,
    stale_after_ms: int | timedelta = DEFAULT_STALE_AFTER_MS,
    client_configs: Mapping[str, Any] | None = None,
    timeout_ms: int | timedelta = DEFAULT_READ_TIMEOUT_MS,
    expected_tasks: Iterable[str | TaskId] = (),
    now_ms: int | None = None,
    allow_empty: bool = False,
) -> ApplicationStatus:
    """Read every instance's document and the live end offsets of the changelog
    partitions they mention, and build the snapshot (see ``build_application_status``).
    Raises UnknownApplicationError when there is no status topic, or no live document
    (unless ``allow_empty``: then the snapshot of an application whose instances all left)."""
    timeout = duration_arg_ms(timeout_ms, "timeout_ms", minimum=1)
    consumer, servers = open_reader_consumer(bootstrap_servers, application_id, timeout, client_configs)
    try:
        documents = _read_documents(consumer, servers, application_id, timeout, allow_empty=allow_empty)
        partitions = {c.topic_partition for d in documents.values() for t in d.tasks for c in t.changelogs}
        try:
            ends = _live_end_offsets(consumer, partitions, timeout)
        except connection_errors() as exc:
            raise BrokerUnreachableError(f"lost Kafka at {servers} while fetching changelog end offsets: "
                                         f"{exc}") from exc
    finally:
        consumer.close()
    return build_application_status(documents, ends, wall_clock_ms() if now_ms is None else now_ms, stale_after_ms,
                                     application_id=application_id, expected_tasks=expected_tasks)


def list_applications(
    source: str | Sequence[str] | ConsumerFactory,
    timeout_ms: int | timedelta = DEFAULT_READ_TIMEOUT_MS,
    *,
    client_configs: Mapping[str, Any] | None = None,
) -> list[str]:
    """The ids of the applications on the cluster: every ``<id>`` with both an ``<id>-status``
    and an ``<id>-control`` topic (an instance or the Spark driver creates the two together),
    sorted. BrokerUnreachableError past ``timeout_ms``."""
    timeout = duration_arg_ms(timeout_ms, "timeout_ms", minimum=1)
    consumer, servers = open_reader_consumer(source, "applications", timeout, client_configs)
    try:
        topics = set(consumer.topics())
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"lost Kafka at {servers} while listing its topics: {exc}") from exc
    finally:
        consumer.close()
    suffix = status_topic_name("")
    return sorted(topic[:-len(suffix)] for topic in topics
                  if topic.endswith(suffix) and len(topic) > len(suffix)
                  and control_topic_name(topic[:-len(suffix)]) in topics)
