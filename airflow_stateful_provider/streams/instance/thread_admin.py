"""ThreadAdmin: the one admin client a stream thread's parts share, created on first use.

A stream thread asks the brokers three things only an admin client answers: log end offsets
counting open transactions (where exactly-once restorations end), the purge of committed
repartition records (the task committer), and whether its topics still exist (the topic
watch). Most threads never ask, so no client exists until one of them does; then all three
use it, and the thread closes it once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from airflow_stateful_provider.streams.errors import IllegalStateError

__all__ = ["ThreadAdmin"]

log = logging.getLogger(__name__)


class ThreadAdmin:
    """``factory`` builds a KafkaAdminClient (None: this thread has none; ``available`` says
    so before anything asks)."""

    def __init__(self, factory: Callable[[], Any] | None, owner: str) -> None:
        self._factory = factory
        self._owner = owner
        self._client: Any = None

    @property
    def available(self) -> bool:
        return self._factory is not None

    def client(self) -> Any:
        """The admin client, created on first use."""
        if self._client is None:
            if self._factory is None:
                raise IllegalStateError(f"{self._owner}: this thread was given no admin client")
            self._client = self._factory()
        return self._client

    def log_end_offsets(self, partitions: list[Any]) -> dict:
        """Log end offsets of ``partitions`` (kafka-python TopicPartitions), open transactions
        included: under exactly-once the restore consumer reads committed records only, so
        its own end offsets are the last stable offsets, not where a restoration ends."""
        from kafka.admin import OffsetSpec
        from kafka.errors import KafkaConnectionError, UnknownBrokerIdError

        try:
            found = self.client().list_partition_offsets({tp: OffsetSpec.LATEST for tp in partitions})
        except UnknownBrokerIdError as exc:
            # kafka-python 3.0.12's admin can come out of an outage of every broker naming a
            # partition leader it has no address for, and stay so: a new admin bootstraps
            # again. Raised as retriable: the caller asks again within the task timeout.
            self.close()
            raise KafkaConnectionError(f"the admin client has no address of broker {exc.args[0] if exc.args else '?'} "
                                       f"(stale metadata): asking a new one") from exc
        return {tp: result.offset for tp, result in found.items()}

    def close(self) -> None:
        """Close the client; the next use creates a new one."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # discarded anyway
                log.debug("%s: closing the admin client failed", self._owner, exc_info=True)
