"""Creating and validating the application's topics on the brokers.

The topics an application needs come from :mod:`.internal_topics`; this module talks to
the brokers (a kafka-python ``KafkaAdminClient``): it creates the missing internal
topics and checks that existing ones have the partition count the topology needs. A
changelog with another partition count would mix the state of different tasks, so that
is an error, never a warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_stateful_provider.streams.errors import StreamsError
from airflow_stateful_provider.streams.kafka.authorization import TOPIC_AUTHORIZATION_FAILED, missing_acl, refusal_in
from airflow_stateful_provider.streams.topics.internal_topics import InternalTopic

__all__ = ["InternalTopicManager", "authorized_operations", "fetch_partition_counts"]

log = logging.getLogger(__name__)


def fetch_partition_counts(admin: Any, topics: Iterable[str], needs: Mapping[str, str] | None = None, *,
                           doing: str = "") -> dict[str, int]:
    """Partition counts of the topics that exist (absent ones are left out). With ``needs``
    (topic -> the operation the caller needs on it, "Read" for a source), a topic the brokers
    hide from this principal is an AuthorizationError naming that ACL, not a missing topic."""
    wanted = sorted(set(topics))
    if not wanted:
        return {}
    existing = set(admin.list_topics())
    present = [t for t in wanted if t in existing]
    hidden = [t for t in wanted if t not in existing and needs and t in needs]
    counts = {}
    for description in admin.describe_topics(present + hidden) if present or hidden else ():
        if description.get("error_code", 0) == 0 and description.get("partitions"):
            counts[description["name"]] = len(description["partitions"])
        elif needs and description.get("error_code") == TOPIC_AUTHORIZATION_FAILED:
            operation = needs.get(description["name"], "Describe")
            denied = [t for t in hidden + present if needs.get(t, "Describe") == operation]
            raise missing_acl("topic", denied, operation, doing=doing or "describing topics")
    return counts


def authorized_operations(admin: Any, topic: str) -> set[str] | None:
    """What this client's principal may do on ``topic`` ("READ", "WRITE", ...), as the brokers
    report it in their metadata answer; None when they do not say (an answer without it, or a
    topic that could not be described)."""
    for description in admin.describe_topics([topic]):
        if description.get("name") == topic and description.get("error_code", 0) == 0:
            operations = description.get("authorized_operations")
            return set(operations) if operations else None  # a described topic allows at least DESCRIBE
    return None


class InternalTopicManager:
    """Creates missing topics and validates the partition counts of existing ones."""

    def __init__(self, admin: Any, *, replication_factor: int = -1, timeout_s: float = 30.0) -> None:
        self._admin = admin
        self._replication_factor = replication_factor
        self._timeout_s = timeout_s

    def ensure(self, topics: Iterable[InternalTopic]) -> list[str]:
        """Create what is missing; returns the names created. Raises when an existing
        topic has another partition count than needed."""
        from kafka.admin import NewTopic
        from kafka.errors import TopicAlreadyExistsError

        topics = list(topics)
        for topic in topics:
            if topic.partitions is None:
                raise StreamsError(f"internal {topic.kind} topic {topic.name!r}: partition count unknown")
        existing = fetch_partition_counts(self._admin, [t.name for t in topics])
        for topic in topics:
            have = existing.get(topic.name)
            if have is not None and have != topic.partitions:
                raise StreamsError(
                    f"internal {topic.kind} topic {topic.name!r} has {have} partitions but the topology needs "
                    f"{topic.partitions}; delete it (its data belongs to another partitioning) or fix the source topics"
                )
        missing = [t for t in topics if t.name not in existing]
        if not missing:
            return []
        try:
            self._admin.create_topics([NewTopic(t.name, t.partitions, self._replication_factor,
                                                topic_configs=dict(t.config)) for t in missing])
        except TopicAlreadyExistsError:
            pass  # another instance created them at the same moment; validated below
        except Exception as exc:
            if refusal_in(exc) is None:
                raise
            raise missing_acl("topic", [t.name for t in missing], "Create",
                              doing=f"creating the internal topics {[t.name for t in missing]}") from None
        self._wait_until_visible(missing)
        for topic in missing:
            log.info("created %s topic %s (%d partitions, %s)", topic.kind, topic.name, topic.partitions, topic.config)
        return [t.name for t in missing]

    def _wait_until_visible(self, topics: list[InternalTopic]) -> None:
        deadline = time.monotonic() + self._timeout_s
        while True:
            counts = fetch_partition_counts(self._admin, [t.name for t in topics])
            pending = [t.name for t in topics if counts.get(t.name) != t.partitions]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise StreamsError(f"topics {pending} were not visible with the expected partition counts "
                                   f"{self._timeout_s:.0f}s after creation")
            time.sleep(0.1)
