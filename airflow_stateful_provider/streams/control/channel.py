"""The operator side of the control topic: send a command, wait for the answers.

Used by the ``stateful-streams stop`` CLI and the Airflow hook. :func:`send_command`
writes one :class:`~airflow_stateful_provider.streams.control.commands.ControlCommand` to
``<application_id>-control`` (it never creates the topic: an instance creates it at
start, so a missing topic means an unknown application). :func:`wait_for_command`
re-reads the status documents until every expected instance answered, and returns the
outcome at its deadline instead of raising, so callers can name who did not answer.
:func:`live_instances` says who is expected to answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.control.commands import CommandOutcome, ControlCommand, command_outcome
from airflow_stateful_provider.streams.durations import duration_arg_ms
from airflow_stateful_provider.streams.errors import (
    BrokerUnreachableError,
    StatusReadTimeoutError,
    UnknownApplicationError,
)
from airflow_stateful_provider.streams.kafka.authorization import missing_acl, refusal_in
from airflow_stateful_provider.streams.kafka.clients import connection_errors, construct_client, servers_text
from airflow_stateful_provider.streams.kafka.producer_close import close_producer
from airflow_stateful_provider.streams.status.application import ApplicationStatus
from airflow_stateful_provider.streams.status.document import InstanceStatus, control_topic_name, status_topic_name
from airflow_stateful_provider.streams.status.reader import (
    DEFAULT_READ_TIMEOUT_MS,
    open_reader_consumer,
    read_status_documents,
)

__all__ = ["send_command", "wait_for_command", "live_instances"]

#: Instance states that will never answer a command (final states).
_ENDED = ("NOT_RUNNING", "ERROR")


def send_command(
    bootstrap_servers: str | Sequence[str],
    command: ControlCommand,
    *,
    client_configs: Mapping[str, Any] | None = None,
    timeout_ms: int | timedelta = 10_000,
) -> None:
    """Write ``command`` to its application's control topic and flush.

    Raises UnknownApplicationError when the control topic does not exist (naming it and
    the servers), BrokerUnreachableError when the brokers cannot be reached or do not
    acknowledge the record within ``timeout_ms``.
    """
    from kafka import KafkaProducer

    timeout = duration_arg_ms(timeout_ms, "timeout_ms", minimum=1)
    topic = control_topic_name(command.application_id)
    servers = servers_text(bootstrap_servers)
    consumer, _ = open_reader_consumer(bootstrap_servers, command.application_id, timeout, client_configs)
    try:
        exists = bool(consumer.partitions_for_topic(topic))
        # the application's status topic in sight but not its control topic: this principal may not see it
        hidden = not exists and bool(consumer.partitions_for_topic(status_topic_name(command.application_id)))
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"lost Kafka at {servers} while looking up {topic!r}: {exc}") from exc
    finally:
        consumer.close()
    if hidden:
        raise missing_acl("topic", [topic], "Write", doing=f"sending command {command.command_id!r} (the topic is "
                                                           f"hidden from this client's principal)")
    if not exists:
        raise UnknownApplicationError(
            f"unknown application {command.application_id!r}: no control topic {topic!r} on {servers} (never "
            f"started, or another cluster); command {command.command_id!r} not sent")
    configs = {"bootstrap_servers": bootstrap_servers, "client_id": f"{command.application_id}-control-sender",
               "acks": "all", "linger_ms": 0, "max_block_ms": timeout, "bootstrap_timeout_ms": timeout,
               **(client_configs or {}), "allow_auto_create_topics": False}
    try:
        producer = construct_client(KafkaProducer, configs)
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"cannot reach Kafka at {servers} within {timeout} ms to send command "
                                     f"{command.command_id!r}: {exc}") from exc
    try:
        future = producer.send(topic, key=command.command_id.encode("utf-8"), value=command.to_json_bytes())
        producer.flush(timeout=timeout / 1000)
        future.get(timeout=timeout / 1000)
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"command {command.command_id!r} not acknowledged by Kafka at {servers} "
                                     f"within {timeout} ms: {exc}") from exc
    except Exception as exc:
        if refusal_in(exc) is None:
            raise
        raise missing_acl("topic", [topic], "Write", doing=f"sending command {command.command_id!r}") from None
    finally:
        close_producer(producer, timeout / 1000)


def live_instances(status: ApplicationStatus, command: ControlCommand) -> tuple[str, ...]:
    """The instances that must answer ``command``: addressed by it, not stale, and not in a
    final state (NOT_RUNNING, ERROR)."""
    return tuple(i.instance_id for i in status.instances
                 if not i.stale and i.state not in _ENDED and command.applies_to(i.instance_id))


def wait_for_command(
    bootstrap_servers: str | Sequence[str],
    command: ControlCommand,
    *,
    instances: Iterable[str],
    client_configs: Mapping[str, Any] | None = None,
    timeout_ms: int | timedelta,
    poll_interval_ms: int = 500,
) -> CommandOutcome:
    """Poll the status documents until every instance of ``instances`` answered ``command``
    (a terminal acknowledgement; for ``stop``, its document removed or NOT_RUNNING), or
    ``timeout_ms`` passed: then the incomplete outcome is returned, not raised.

    Raises BrokerUnreachableError when the brokers cannot be reached, and
    StatusReadTimeoutError if not one read of the status topic finished in time (an
    outcome from no documents would count every instance as stopped).
    """
    expected = tuple(dict.fromkeys(instances))
    timeout = duration_arg_ms(timeout_ms, "timeout_ms", minimum=0)
    interval = duration_arg_ms(poll_interval_ms, "poll_interval_ms", minimum=1)
    deadline = time.monotonic() + timeout / 1000
    documents: Mapping[str, InstanceStatus] | None = None
    last_error: StatusReadTimeoutError | None = None
    while True:
        left_ms = int((deadline - time.monotonic()) * 1000)
        try:
            documents = read_status_documents(bootstrap_servers, command.application_id,
                                              max(1_000, min(left_ms, DEFAULT_READ_TIMEOUT_MS)),
                                              client_configs=client_configs, allow_empty=True)
        except StatusReadTimeoutError as exc:
            last_error = exc
        if documents is not None:
            outcome = command_outcome(command, documents, expected)
            if outcome.complete:
                return outcome
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            if documents is None:
                raise last_error or StatusReadTimeoutError(
                    f"no status of application {command.application_id!r} read before the deadline")
            return outcome
        time.sleep(min(interval, left_ms) / 1000)
