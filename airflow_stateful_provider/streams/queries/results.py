"""What an interactive query answers: one result per partition, and the request's whole answer.

A :class:`QueryResult` says which instance, task and partition answered, whether it was a
standby (and how far behind), and the :class:`Position` the answer reflects; or why that
partition could not answer (``failure_reason``). :class:`StateQueryResult` gathers them
(Kafka Streams' ``StateQueryResult``) and merges a range query's pages. The JSON forms are
what travels on the query topics: a remote caller gets the results with their values as
JSON (``to_json_value``), having no serdes of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_stateful_provider.streams.errors import InvalidQueryError, TaskNotAvailableError
from airflow_stateful_provider.streams.processor import KeyValue
from airflow_stateful_provider.streams.queries.requests import Position, Query, RangeQuery
from airflow_stateful_provider.streams.windows import Windowed

__all__ = ["KeyQueryMetadata", "QueryResult", "StateQueryResult", "to_json_value"]

#: Failure reasons (TaskNotAvailableError.reason).
RESTORING = "restoring"
NOT_OWNED = "not_owned"
LAGGING = "lagging"
BEHIND_POSITION = "position"


def to_json_value(value: Any) -> Any:
    """A query answer as JSON data: a ``KeyValue`` is ``{"key", "value"}`` (a session adds
    ``start`` and ``end``), a versioned record ``{"value", "timestamp", "valid_to"}``."""
    if isinstance(value, list):
        return [to_json_value(v) for v in value]
    if isinstance(value, KeyValue):
        if isinstance(value.key, Windowed):
            return {"key": value.key.key, "start": value.key.window.start, "end": value.key.window.end,
                    "value": value.value}
        return {"key": value.key, "value": value.value}
    if hasattr(value, "timestamp") and hasattr(value, "valid_to"):  # VersionedRecord
        return {"value": value.value, "timestamp": value.timestamp, "valid_to": value.valid_to}
    return value


@dataclasses.dataclass(frozen=True)
class QueryResult:
    """One partition's answer (or why it has none)."""

    partition: int
    task_id: str
    instance_id: str
    result: Any = None
    position: Position = Position()
    standby: bool = False
    #: A standby's changelog records still to apply when it answered (0 for an active).
    lag: int = 0
    failure_reason: str | None = None
    failure: str | None = None
    #: Range queries: the serialized keys of ``result`` (hex), for merging partitions' pages,
    #: and whether the partition had more records than it returned.
    sort_keys: tuple[str, ...] = ()
    more: bool = False

    @property
    def is_success(self) -> bool:
        return self.failure_reason is None

    def get_result(self) -> Any:
        """The answer; raises TaskNotAvailableError (with the reason) for a failed partition."""
        if self.failure_reason is not None:
            raise TaskNotAvailableError(self.failure or self.failure_reason, reason=self.failure_reason)
        return self.result

    def to_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "task_id": self.task_id, "instance_id": self.instance_id,
                "result": to_json_value(self.result), "position": self.position.to_dict(), "standby": self.standby,
                "lag": self.lag, "failure_reason": self.failure_reason, "failure": self.failure,
                "sort_keys": list(self.sort_keys), "more": self.more}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueryResult:
        try:
            return cls(partition=int(data["partition"]), task_id=str(data["task_id"]),
                       instance_id=str(data["instance_id"]), result=data.get("result"),
                       position=Position.from_dict(data.get("position")), standby=bool(data.get("standby")),
                       lag=int(data.get("lag") or 0), failure_reason=data.get("failure_reason"),
                       failure=data.get("failure"), sort_keys=tuple(data.get("sort_keys") or ()),
                       more=bool(data.get("more")))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidQueryError(f"malformed query result {dict(data)!r:.200}: {exc!r}") from None


@dataclasses.dataclass(frozen=True)
class StateQueryResult:
    """The answer to a :class:`StateQueryRequest`: a result per partition asked."""

    store: str
    query: Query
    partition_results: Mapping[int, QueryResult]

    def only_partition_result(self) -> QueryResult:
        """The one partition's result of a keyed query (raises if it asked several)."""
        if len(self.partition_results) != 1:
            raise InvalidQueryError(f"store {self.store!r}: {len(self.partition_results)} partitions answered; "
                                    f"use partition_results for queries over several partitions")
        return next(iter(self.partition_results.values()))

    def value(self) -> Any:
        """A keyed query's answer; raises TaskNotAvailableError when its partition failed."""
        return self.only_partition_result().get_result()

    def failures(self) -> list[QueryResult]:
        return [r for _, r in sorted(self.partition_results.items()) if not r.is_success]

    def raise_failures(self) -> None:
        """Raise TaskNotAvailableError naming every failed partition (one reason: the first)."""
        failed = self.failures()
        if failed:
            detail = "; ".join(f"partition {r.partition} (task {r.task_id}): {r.failure}" for r in failed)
            raise TaskNotAvailableError(f"store {self.store!r}: {len(failed)} of {len(self.partition_results)} "
                                        f"partition(s) could not answer: {detail}", reason=failed[0].failure_reason
                                        or NOT_OWNED)

    def records(self) -> list[Any]:
        """A range query's page: every partition's entries in serialized-key order, at most the
        query's limit. Raises TaskNotAvailableError if a partition could not answer (a page
        without it would silently miss its keys)."""
        return self._merged()[0]

    @property
    def continuation(self) -> str | None:
        """The token of the next page of a range query (None: this page is the last)."""
        return self._merged()[1]

    def _merged(self) -> tuple[list[Any], str | None]:
        query = self.query
        if not isinstance(query, RangeQuery):
            raise InvalidQueryError(f"records() and continuation are for range queries, not {type(query).__name__}")
        self.raise_failures()
        rows = [(sort_key, entry) for r in self.partition_results.values()
                for sort_key, entry in zip(r.sort_keys, r.result or (), strict=True)]
        rows.sort(key=lambda row: bytes.fromhex(row[0]), reverse=query.descending)
        page = rows[:query.limit]
        more = len(rows) > len(page) or any(r.more for r in self.partition_results.values())
        return [entry for _, entry in page], (page[-1][0] if more and page else None)


@dataclasses.dataclass(frozen=True)
class KeyQueryMetadata:
    """Where a key of a store lives (Kafka Streams' ``KeyQueryMetadata``): its partition and
    task, the instance running the task (None while no instance reports it running) and
    those keeping standbys of it: instance ids, as in the status documents."""

    store: str
    partition: int
    task_id: str
    active_instance: str | None
    standby_instances: tuple[str, ...] = ()


def failed(partition: int, task_id: str, instance_id: str, reason: str, message: str, *,
           standby: bool = False, lag: int = 0, position: Position | None = None) -> QueryResult:
    return QueryResult(partition, task_id, instance_id, failure_reason=reason, failure=message, standby=standby,
                       lag=lag, position=position or Position())


def best_results(results: Sequence[QueryResult]) -> dict[int, QueryResult]:
    """Per partition the best answer among several replicas: a success over a failure, an
    active over a standby, a smaller lag over a larger one."""
    best: dict[int, QueryResult] = {}
    for result in results:
        current = best.get(result.partition)
        if current is None or _rank(result) < _rank(current):
            best[result.partition] = result
    return best


def _rank(result: QueryResult) -> tuple[int, int, int]:
    return (0 if result.is_success else 1, 1 if result.standby else 0, result.lag)
