"""Kafka clients that fail cleanly: construction that does not leak, errors that name the brokers.

Everything that opens a short-lived client to read or send (status readers and publisher,
the control channel, the Airflow hook) builds it here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_stateful_provider.streams.kafka.client_settings import client_kind, settings_for

__all__ = ["connection_errors", "construct_client", "servers_text"]

log = logging.getLogger(__name__)


def servers_text(servers: str | Sequence[str]) -> str:
    return servers if isinstance(servers, str) else ",".join(servers)


def connection_errors() -> tuple[type[BaseException], ...]:
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError

    return (KafkaConnectionError, KafkaTimeoutError)


def construct_client(client_class: Any, configs: Mapping[str, Any]) -> Any:
    """``client_class(**configs)``, closing the network client if the constructor fails:
    kafka-python 3 starts its IO thread before bootstrapping and leaves it running when
    the bootstrap times out, so every failed attempt (a sensor poking, ``--watch``)
    would leak a thread. ``kafka_client`` is the documented hook for the client factory;
    its default, ``kafka.net.compat.KafkaNetClient``, is not exported (checked against
    kafka-python 3.0.12).

    A consumer, producer or admin client gets only the settings it knows (one set of
    client configs serves all three); a setting no client knows is a ConfigError."""
    from kafka.net.compat import KafkaNetClient

    kind = client_kind(client_class)
    if kind is not None:
        configs = settings_for(kind, configs)

    factory = configs.get("kafka_client", KafkaNetClient)
    created: list[Any] = []

    def tracked(*args: Any, **kwargs: Any) -> Any:
        created.append(factory(*args, **kwargs))
        return created[-1]

    try:
        return client_class(**{**configs, "kafka_client": tracked})
    except BaseException:
        for client in created:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - already failing; the original error matters
                log.debug("closing the network client of a failed %s", client_class.__name__, exc_info=True)
        raise
