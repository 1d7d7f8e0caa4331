"""The caller side of remote queries: ask a running application over Kafka, no other network path.

:func:`query_application` subscribes to ``<application_id>-query-answers`` at its end,
writes the request to ``<application_id>-queries`` and gathers the answers keyed by its
request id until every asked partition has a final answer or the timeout passes. Final: a
success (from the active, or from a standby when stale reads are allowed), or, when only
actives may answer, the active's failure ("restoring", "position"). The caller needs no
serdes: keys go as JSON and are serialized where the store lives; values come back as
JSON (``to_json_value``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.errors import (
    BrokerUnreachableError,
    InstanceNotRunningError,
    InvalidQueryError,
    QueryError,
    QueryTimeoutError,
    TaskNotAvailableError,
    UnknownApplicationError,
    UnknownStoreError,
    WrongStoreKindError,
)
from airflow_stateful_provider.streams.kafka.clients import connection_errors, construct_client, servers_text
from airflow_stateful_provider.streams.kafka.producer_close import close_producer
from airflow_stateful_provider.streams.queries.requests import Position, StateQueryRequest
from airflow_stateful_provider.streams.queries.results import (
    NOT_OWNED,
    QueryResult,
    StateQueryResult,
    best_results,
    failed,
)
from airflow_stateful_provider.streams.queries.wire import (
    QueryAnswer,
    RemoteQuery,
    answers_topic_name,
    queries_topic_name,
)

__all__ = ["QueryClient", "committed_position", "query_application"]

#: The errors an instance may refuse a request with, by the name on the wire.
_ERRORS: dict[str, type[QueryError]] = {cls.__name__: cls for cls in (
    QueryError, InvalidQueryError, UnknownStoreError, InstanceNotRunningError, TaskNotAvailableError,
    QueryTimeoutError)}


def query_application(bootstrap_servers: str | Sequence[str], application_id: str, request: StateQueryRequest, *,
                      timeout_ms: int = 10_000, client_configs: Mapping[str, Any] | None = None) -> StateQueryResult:
    """Ask the running instances of ``application_id`` once (see module docstring; a
    :class:`QueryClient` keeps its connections for many queries).

    Raises UnknownApplicationError when the application has no query topics (never
    started, or started before this version), BrokerUnreachableError when Kafka cannot be
    reached, UnknownStoreError / InvalidQueryError as the instances refuse the request,
    QueryTimeoutError when no instance answered at all within ``timeout_ms``. A partition
    nobody could serve in time is a failed result (``get_result``, ``value()`` and
    ``records()`` raise TaskNotAvailableError for it).
    """
    with QueryClient(bootstrap_servers, application_id, timeout_ms=timeout_ms,
                     client_configs=client_configs) as client:
        return client.query(request, timeout_ms=timeout_ms)


class QueryClient:
    """Remote queries of one application over kept connections: most of a one-off query's
    time is setting up its consumer and producer. Not thread-safe: one per thread.

    ``QueryClient(servers, "clicks")`` connects (within ``timeout_ms``) and checks that the
    application's query topics exist; ``query(request)`` as :func:`query_application`;
    ``close()`` (or ``with``) releases the connections.
    """

    def __init__(self, bootstrap_servers: str | Sequence[str], application_id: str, *, timeout_ms: int = 10_000,
                 client_configs: Mapping[str, Any] | None = None) -> None:
        from kafka import KafkaConsumer, KafkaProducer
        from kafka import TopicPartition as KafkaTopicPartition

        _check_timeout(timeout_ms)
        self.application_id = application_id
        self._servers = servers_text(bootstrap_servers)
        common = {"bootstrap_servers": bootstrap_servers, "bootstrap_timeout_ms": timeout_ms,
                  "request_timeout_ms": max(timeout_ms, 1_000), "client_id": f"{application_id}-query-caller",
                  **(client_configs or {})}
        self._producer: Any = None
        try:
            self._consumer = construct_client(KafkaConsumer, {**common, "group_id": None, "enable_auto_commit": False,
                                                              "allow_auto_create_topics": False,
                                                              "fetch_max_wait_ms": 20})
        except connection_errors() as exc:
            raise BrokerUnreachableError(f"cannot reach Kafka at {self._servers} within {timeout_ms} ms to query "
                                         f"application {application_id!r}: {exc}") from exc
        try:
            answers = answers_topic_name(application_id)
            if not self._consumer.partitions_for_topic(answers) or not self._consumer.partitions_for_topic(
                    queries_topic_name(application_id)):
                raise UnknownApplicationError(
                    f"unknown application {application_id!r}: no query topics "
                    f"{queries_topic_name(application_id)!r} and {answers!r} on {self._servers} (never started, "
                    f"or another cluster)")
            # Answers to come are read from here on: the position is taken before any request is sent.
            tp = KafkaTopicPartition(answers, 0)
            self._consumer.assign([tp])
            self._consumer.seek(tp, self._consumer.end_offsets([tp])[tp])
            self._producer = construct_client(KafkaProducer, {**common, "acks": "all", "linger_ms": 0,
                                                              "max_block_ms": timeout_ms,
                                                              "allow_auto_create_topics": False})
        except connection_errors() as exc:
            self.close()
            raise BrokerUnreachableError(f"lost Kafka at {self._servers} while connecting to application "
                                         f"{application_id!r}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    def query(self, request: StateQueryRequest, *, timeout_ms: int = 10_000) -> StateQueryResult:
        """Send ``request`` and gather the answers (see :func:`query_application`)."""
        _check_timeout(timeout_ms)
        request.checked_query()
        deadline = time.monotonic() + timeout_ms / 1000
        query = RemoteQuery.new(self.application_id, request, wall_clock_ms() + timeout_ms)
        try:
            self._producer.send(queries_topic_name(self.application_id), key=query.request_id.encode(),
                                value=query.to_json_bytes()).get(timeout=max(0.001, deadline - time.monotonic()))
            return _gather(self._consumer, query, deadline, timeout_ms)
        except connection_errors() as exc:
            raise BrokerUnreachableError(f"lost Kafka at {self._servers} while querying application "
                                         f"{self.application_id!r}: {exc}") from exc

    def close(self) -> None:
        self._consumer.close(autocommit=False)
        if self._producer is not None:
            close_producer(self._producer, 1)

    def __enter__(self) -> QueryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_timeout(timeout_ms: Any) -> None:
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1:
        raise InvalidQueryError(f"timeout_ms must be an int >= 1, got {timeout_ms!r}")


def _gather(consumer: Any, query: RemoteQuery, deadline: float, timeout_ms: int) -> StateQueryResult:
    request = query.request
    stale = request.max_standby_lag is not None
    partitions: set[int] | None = None
    results: list[QueryResult] = []
    answered = False
    while True:
        best = best_results(results)
        if partitions is not None and all(p in best and _final(best[p], stale) for p in partitions):
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for records in consumer.poll(timeout_ms=max(1, int(min(left, 0.2) * 1000))).values():
            for record in records:
                if record.key != query.request_id.encode():
                    continue
                answer = QueryAnswer.from_json_bytes(record.value)
                answered = True
                if answer.error is not None:
                    kind, message = answer.error
                    if kind == WrongStoreKindError.__name__:
                        raise WrongStoreKindError(message, kind=answer.store_kind)
                    raise _ERRORS.get(kind, QueryError)(f"instance {answer.instance_id}: {message}")
                partitions = set(answer.partitions) if partitions is None else partitions
                results += answer.results
    if not answered:
        raise QueryTimeoutError(f"no instance of application {query.application_id!r} answered query "
                                f"{query.request_id} on store {request.store!r} within {timeout_ms} ms: is it "
                                f"running, and does an instance hold the asked partitions?")
    best = best_results(results)
    for partition in sorted((partitions or set()) - set(best)):
        best[partition] = failed(partition, "", "", NOT_OWNED,
                                 f"no instance answered for partition {partition} of store {request.store!r} within "
                                 f"{timeout_ms} ms (its task may be moving between instances); retry")
    return StateQueryResult(request.store, request.checked_query(), dict(sorted(best.items())))


def _final(result: QueryResult, stale: bool) -> bool:
    """Whether no better answer can come for this partition."""
    return result.is_success or (not stale and not result.standby)


def committed_position(bootstrap_servers: str | Sequence[str], application_id: str, *,
                       timeout_ms: int = 10_000, client_configs: Mapping[str, Any] | None = None) -> Position:
    """The input offsets ``application_id`` has committed now, as a position: with
    ``PositionBound.at(committed_position(...))`` an answer reflects at least everything the
    application had committed when this was called (read-your-writes for output already seen)."""
    from kafka import KafkaAdminClient

    servers = servers_text(bootstrap_servers)
    try:
        admin = construct_client(KafkaAdminClient, {"bootstrap_servers": bootstrap_servers,
                                                    "bootstrap_timeout_ms": timeout_ms,
                                                    "request_timeout_ms": max(timeout_ms, 1_000),
                                                    "client_id": f"{application_id}-query-caller",
                                                    **(client_configs or {})})
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"cannot reach Kafka at {servers} within {timeout_ms} ms: {exc}") from exc
    try:
        offsets = admin.list_group_offsets({application_id: None}).get(application_id, {})
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"lost Kafka at {servers} reading the offsets of {application_id!r}: "
                                     f"{exc}") from exc
    finally:
        admin.close()
    return Position.of({(tp.topic, tp.partition): om.offset for tp, om in offsets.items() if om.offset >= 0})
