"""The ``stateful_streams`` connection's hook: Kafka clients on the connection's brokers and
security settings (hooks/kafka_connection.py), and the status/control protocol of stateful
stream applications on top of them.

Every duration the hook takes (``timeout``, ``stale_after``) follows Airflow's convention: a
number is seconds (int or float), or give a timedelta.

The secrets of the connection (the SASL password, an OAUTHBEARER token, a client key's
password) are never logged and never appear in an error message or a repr.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_stateful_provider.hooks.kafka_connection import (
    CONN_TYPE,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    client_configs_from_connection,
    redact_client_configs,
)
from airflow_stateful_provider.streams.durations import seconds_arg_ms
from airflow_stateful_provider.streams.status.document import DEFAULT_STALE_AFTER_MS

if TYPE_CHECKING:
    from airflow_stateful_provider.streams.control.commands import CommandOutcome, ControlCommand
    from airflow_stateful_provider.streams.status.application import ApplicationStatus
    from airflow_stateful_provider.streams.task_id import TaskId

__all__ = ["StatefulStreamsHook", "client_configs_from_connection", "redact_client_configs",
           "SECURITY_PROTOCOLS", "SASL_MECHANISMS", "DEFAULT_READ_TIMEOUT",
           "DEFAULT_STALE_AFTER"]

#: Bound of one status read or metadata request when the caller gives none.
DEFAULT_READ_TIMEOUT = timedelta(seconds=10)
#: A status document older than this is stale when the caller gives no ``stale_after``.
DEFAULT_STALE_AFTER = timedelta(milliseconds=DEFAULT_STALE_AFTER_MS)


class StatefulStreamsHook(BaseHook):
    """Kafka clients, status reads and control commands for one ``stateful_streams`` connection.

    :param stateful_streams_conn_id: the Airflow connection (type ``stateful_streams``).
    """

    conn_name_attr = "stateful_streams_conn_id"
    default_conn_name = "stateful_streams_default"
    conn_type = CONN_TYPE
    hook_name = "Stateful Streams (Kafka)"

    def __init__(self, stateful_streams_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stateful_streams_conn_id = stateful_streams_conn_id
        self._client_configs: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(stateful_streams_conn_id={self.stateful_streams_conn_id!r})"

    # ------------------------------------------------------------------ configs

    def get_client_configs(self) -> dict[str, Any]:
        """kafka-python configs (bootstrap servers and security settings) of the connection.
        Contains the password: pass it to clients, log :meth:`redacted_client_configs`."""
        if self._client_configs is None:
            self._client_configs = client_configs_from_connection(self.get_connection(self.stateful_streams_conn_id))
        return dict(self._client_configs)

    async def aget_client_configs(self) -> dict[str, Any]:
        """:meth:`get_client_configs` without blocking the event loop (for triggers)."""
        if self._client_configs is None:
            conn = await self.aget_connection(self.stateful_streams_conn_id)
            self._client_configs = client_configs_from_connection(conn)
        return dict(self._client_configs)

    def redacted_client_configs(self) -> dict[str, Any]:
        return redact_client_configs(self.get_client_configs())

    @property
    def bootstrap_servers(self) -> list[str]:
        return list(self.get_client_configs()["bootstrap_servers"])

    def _security_configs(self) -> dict[str, Any]:
        return {k: v for k, v in self.get_client_configs().items() if k != "bootstrap_servers"}

    # ------------------------------------------------------------------ clients

    def _client(self, client_class: Any, overrides: Mapping[str, Any]) -> Any:
        # construct_client closes the network client when bootstrapping fails: kafka-python 3 would
        # otherwise leak its IO thread on every failed attempt (a sensor poking a dead broker).
        from airflow_stateful_provider.streams.kafka.clients import construct_client

        return construct_client(client_class, {**self.get_client_configs(), **overrides})

    def get_consumer(self, **overrides: Any) -> Any:
        """A ``KafkaConsumer`` on the connection; ``overrides`` are further consumer configs."""
        from kafka import KafkaConsumer

        return self._client(KafkaConsumer, overrides)

    def get_producer(self, **overrides: Any) -> Any:
        """A ``KafkaProducer`` on the connection; ``overrides`` are further producer configs."""
        from kafka import KafkaProducer

        return self._client(KafkaProducer, overrides)

    def get_admin_client(self, **overrides: Any) -> Any:
        """A ``KafkaAdminClient`` on the connection; ``overrides`` are further admin configs."""
        from kafka import KafkaAdminClient

        return self._client(KafkaAdminClient, overrides)

    def get_conn(self) -> Any:
        return self.get_admin_client()

    def test_connection(self, timeout: float | timedelta = DEFAULT_READ_TIMEOUT) -> tuple[bool, str]:
        """A metadata request against the brokers, bounded by ``timeout`` (seconds or a timedelta):
        (ok, message)."""
        timeout_ms = seconds_arg_ms(timeout, "timeout", minimum_ms=1)
        try:
            servers = ",".join(self.bootstrap_servers)
        except Exception as exc:  # noqa: BLE001 - a bad connection is the answer, not a crash
            return False, f"connection {self.stateful_streams_conn_id!r} is invalid: {exc}"
        started = time.monotonic()
        try:
            admin = self.get_admin_client(bootstrap_timeout_ms=timeout_ms, request_timeout_ms=timeout_ms,
                                          client_id=f"{self.stateful_streams_conn_id}-test")
            try:
                cluster = admin.describe_cluster()
            finally:
                admin.close()
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the user
            return False, (f"cannot reach Kafka at {servers} within {timeout_ms} ms "
                           f"({type(exc).__name__}: {exc})")
        brokers = cluster.get("brokers") or []
        return True, (f"connected to Kafka cluster {cluster.get('cluster_id')!r} at {servers} in "
                      f"{time.monotonic() - started:.1f}s: {len(brokers)} broker(s)")

    # ------------------------------------------------------------------ status

    def get_status(
        self,
        application_id: str,
        *,
        stale_after: float | timedelta = DEFAULT_STALE_AFTER,
        timeout: float | timedelta = DEFAULT_READ_TIMEOUT,
        expected_tasks: Iterable[str | TaskId] = (),
        allow_empty: bool = False,
    ) -> ApplicationStatus:
        """The application's status snapshot (``fetch_application_status`` on this connection).

        ``stale_after``: documents older than this (seconds or a timedelta) are flagged and not
        trusted; ``timeout``: bound of the whole read (seconds or a timedelta); ``expected_tasks`` are listed (as
        unassigned) even when no instance claims them; ``allow_empty``: an application
        whose instances all left cleanly is a snapshot without instances, not an error.
        Raises the engine's UnknownApplicationError, BrokerUnreachableError,
        StatusReadTimeoutError, StatusFormatError.
        """
        from airflow_stateful_provider.streams.status.reader import fetch_application_status

        configs = self.get_client_configs()
        return fetch_application_status(
            configs.pop("bootstrap_servers"), application_id,
            stale_after_ms=seconds_arg_ms(stale_after, "stale_after"), client_configs=configs,
            timeout_ms=seconds_arg_ms(timeout, "timeout", minimum_ms=1), expected_tasks=list(expected_tasks),
            allow_empty=allow_empty)

    def list_applications(self, *, timeout: float | timedelta = DEFAULT_READ_TIMEOUT) -> list[str]:
        """The applications on this connection's cluster (``list_applications``: every id with a
        status and a control topic), sorted; BrokerUnreachableError past ``timeout`` (seconds or a
        timedelta)."""
        from airflow_stateful_provider.streams.status.reader import list_applications

        configs = self.get_client_configs()
        return list_applications(configs.pop("bootstrap_servers"), seconds_arg_ms(timeout, "timeout", minimum_ms=1),
                                 client_configs=configs)

    async def aget_status(
        self,
        application_id: str,
        *,
        stale_after: float | timedelta = DEFAULT_STALE_AFTER,
        timeout: float | timedelta = DEFAULT_READ_TIMEOUT,
        expected_tasks: Iterable[str | TaskId] = (),
    ) -> ApplicationStatus:
        """:meth:`get_status` for triggers: the connection is looked up asynchronously and
        the blocking Kafka read runs in a worker thread, never on the event loop."""
        await self.aget_client_configs()
        return await asyncio.to_thread(self.get_status, application_id, stale_after=stale_after, timeout=timeout,
                                       expected_tasks=list(expected_tasks))

    # ------------------------------------------------------------------ control

    def send_command(
        self,
        application_id: str,
        command_type: str,
        *,
        instances: Sequence[str] | None = None,
        stores: Sequence[str] | None = None,
        now_ms: int | None = None,
    ) -> ControlCommand:
        """Publish a new command to ``<application_id>-control``; returns it (its id is what
        the instances acknowledge). ``instances``/``stores`` restrict it (None: all)."""
        from airflow_stateful_provider.streams.control.channel import send_command
        from airflow_stateful_provider.streams.control.commands import new_command

        command = new_command(application_id, command_type, instances=instances, stores=stores, now_ms=now_ms)
        configs = self.get_client_configs()
        send_command(configs.pop("bootstrap_servers"), command, client_configs=configs)
        return command

    def wait_for_command(
        self,
        command: ControlCommand,
        *,
        instances: Iterable[str],
        timeout: float | timedelta,
    ) -> CommandOutcome:
        """Wait until every instance in ``instances`` acknowledged ``command`` as finished, or
        ``timeout`` (seconds or a timedelta: ``timeout=60`` is a minute) passed; the outcome says
        which answered, which failed, which are missing."""
        from airflow_stateful_provider.streams.control.channel import wait_for_command

        configs = self.get_client_configs()
        return wait_for_command(configs.pop("bootstrap_servers"), command, instances=list(instances),
                                client_configs=configs, timeout_ms=seconds_arg_ms(timeout, "timeout", minimum_ms=1))

    # ------------------------------------------------------------------ queries

    def query_store(
        self,
        application_id: str,
        store: str,
        key: Any = None,
        *,
        key_range: tuple[Any, Any] | None = None,
        as_of: int | None = None,
        allow_stale: bool = False,
        max_lag: int | None = None,
        limit: int | None = None,
        continuation: str | None = None,
        timeout: float | timedelta = DEFAULT_READ_TIMEOUT,
    ) -> dict[str, Any]:
        """Read live state of a running application over its query topics
        (docs/interactive-queries.md): ``key``'s value (the version valid ``as_of`` on a
        versioned store, the sessions on a session store) or a page of ``key_range``.
        Returns JSON data with the answering instance, task, partition and position; raises
        the engine's UnknownApplicationError, UnknownStoreError, TaskNotAvailableError
        ("restoring"), QueryTimeoutError past ``timeout`` (seconds or a timedelta)."""
        from airflow_stateful_provider.streams.queries.lookups import DEFAULT_MAX_LAG, lookup_store
        from airflow_stateful_provider.streams.queries.requests import DEFAULT_LIMIT

        configs = self.get_client_configs()
        return lookup_store(configs.pop("bootstrap_servers"), application_id, store, key, key_range=key_range,
                            as_of=as_of, allow_stale=allow_stale,
                            max_lag=DEFAULT_MAX_LAG if max_lag is None else max_lag,
                            limit=DEFAULT_LIMIT if limit is None else limit, continuation=continuation,
                            timeout_ms=seconds_arg_ms(timeout, "timeout", minimum_ms=1), client_configs=configs)
