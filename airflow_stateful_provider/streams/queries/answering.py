"""Answering a query on the stream thread that owns the stores.

Queries arrive from other threads (the caller of ``KafkaStreams.query``, the query
responder), but a store is written by its stream thread only, and its reads see the
record cache and the exactly-once write buffer, which are not thread-safe. So a query is
handed to each stream thread as a safe-point action (``StreamThread.run_at_safe_point``)
and answered there between two loop iterations: no record is half-processed, and the
answer and its position come from the same instant. The cost is the wait for the next
iteration, at most one processing budget (``commit_interval_ms``, up to 1 s).

An active task answers when it runs; a restoring one fails with "restoring". A standby
answers only when the request allows stale reads and its changelog lag is within the
bound; its position is in changelog offsets, so a position bound always needs the active.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from airflow_stateful_provider.streams.errors import InvalidQueryError
from airflow_stateful_provider.streams.kafka.positions import local_position
from airflow_stateful_provider.streams.processing.task import TaskState
from airflow_stateful_provider.streams.processor import KeyValue
from airflow_stateful_provider.streams.queries.requests import (
    KeyQuery,
    MultiVersionedKeyQuery,
    Position,
    Query,
    RangeQuery,
    SessionQuery,
    StateQueryRequest,
    VersionedKeyQuery,
)
from airflow_stateful_provider.streams.queries.results import (
    BEHIND_POSITION,
    LAGGING,
    RESTORING,
    QueryResult,
    failed,
)

__all__ = ["QueryTarget", "answer_on_thread", "key_partition", "run_query", "serialize_key"]

#: The largest session timestamp (open bound of a session query).
_MAX_TIME = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class QueryTarget:
    """A request resolved against the topology: the store's subtopology and the partitions
    to answer."""

    request: StateQueryRequest
    subtopology: int
    partitions: frozenset[int]
    instance_id: str


def serialize_key(key_serde: Any, store: str, key: Any) -> bytes:
    """The key's bytes in the store, or InvalidQueryError naming the key and the serde."""
    try:
        data = key_serde.serialize(key)
    except Exception as exc:  # noqa: BLE001 - any serde failure is a bad key for this store
        raise InvalidQueryError(f"key {key!r:.80} does not fit store {store!r}'s key serde {key_serde!r}: {exc}; "
                                f"give a key of the type the store holds") from None
    if not isinstance(data, bytes):
        raise InvalidQueryError(f"store {store!r}: key serde {key_serde!r} gave {type(data).__name__} for {key!r:.80}")
    return data


def key_partition(key_bytes: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key_bytes`` (murmur2), which is the
    partition, and the task, whose store holds the key when the input is keyed by it."""
    from kafka.partitioner import murmur2

    return (murmur2(key_bytes) & 0x7FFFFFFF) % num_partitions


def answer_on_thread(thread: Any, target: QueryTarget) -> list[QueryResult]:
    """Run on the stream thread: the answers of the tasks it holds among the target's
    partitions (actives; standbys when stale reads are allowed)."""
    request = target.request
    results = []
    for task in list(thread.tasks.values()):
        if _targets(task, target) and task.state is not TaskState.CLOSED:
            results.append(_answer_active(task, target))
    if request.max_standby_lag is not None:
        lags = _standby_lags(thread)
        for standby in list(thread.standby_tasks.values()):
            if _targets(standby, target) and standby.state is not TaskState.CLOSED:
                results.append(_answer_standby(standby, target, lags.get(standby.id)))
    return results


def _targets(task: Any, target: QueryTarget) -> bool:
    return task.id.subtopology == target.subtopology and task.id.partition in target.partitions


def _answer_active(task: Any, target: QueryTarget) -> QueryResult:
    partition, task_id, me = task.id.partition, str(task.id), target.instance_id
    if task.state is not TaskState.RUNNING:
        return failed(partition, task_id, me, RESTORING, f"task {task_id} of store {target.request.store!r} on "
                      f"instance {me} is {task.state.value.lower()} (restoring its state); retry shortly")
    position = Position.of(task.processed_position())
    bound = target.request.position_bound.position
    if bound is not None and not position.dominates(bound, within=set(task.partitions)):
        return failed(partition, task_id, me, BEHIND_POSITION,
                      f"task {task_id} on instance {me} is at {position.to_dict()}, behind the position bound "
                      f"{bound.to_dict()}; retry once it has processed that far", position=position)
    return _run(task.stores, target, partition, task_id, standby=False, lag=0, position=position)


def _answer_standby(standby: Any, target: QueryTarget, lag: int | None) -> QueryResult:
    partition, task_id, me = standby.id.partition, str(standby.id), target.instance_id
    limit = target.request.max_standby_lag
    if lag is None or lag > limit:  # type: ignore[operator]
        seen = (f"{lag} changelog records" if lag is not None
                else "not known (no end seen yet, or updates paused while active tasks restore)")
        return failed(partition, task_id, me, LAGGING, f"standby of task {task_id} on instance {me} is behind by "
                      f"{seen}, over the allowed {limit}", standby=True, lag=lag or 0)
    if target.request.position_bound.position is not None:
        return failed(partition, task_id, me, BEHIND_POSITION, f"standby of task {task_id} on instance {me} keeps no "
                      f"input position: a position bound needs the active task", standby=True, lag=lag)
    return _run(standby.stores, target, partition, task_id, standby=True, lag=lag, position=Position())


def _standby_lags(thread: Any) -> dict[Any, int | None]:
    """Per standby task, the changelog offsets it has not read up to the end its restore
    consumer last saw (None: not known). The consumer's own position counts, as it moves
    past transaction markers (exactly-once), which are no records to apply. While the
    standby's partitions are paused (active tasks restore first) that end is not updated,
    so the lag is not known then."""
    lags: dict[Any, int | None] = {}
    paused = {(tp.topic, tp.partition) for tp in thread.restore_consumer.paused()}
    for state in thread.changelog_reader.progress():
        if state.end_offset is None or (state.partition.topic, state.partition.partition) in paused:
            lags[state.task_id] = None
        elif state.task_id not in lags or lags[state.task_id] is not None:
            read = local_position(thread.restore_consumer, state.partition.topic, state.partition.partition)
            position = max(state.position, read or 0)
            lags[state.task_id] = (lags.get(state.task_id) or 0) + max(0, state.end_offset - position)
    return lags


def _run(stores: Any, target: QueryTarget, partition: int, task_id: str, *, standby: bool, lag: int,
         position: Position) -> QueryResult:
    query = target.request.checked_query()
    store = stores.get(target.request.store)
    result, sort_keys, more = run_query(store, target.request.store, query)
    return QueryResult(partition, task_id, target.instance_id, result=result, position=position, standby=standby,
                       lag=lag, sort_keys=sort_keys, more=more)


def run_query(store: Any, name: str, query: Query) -> tuple[Any, tuple[str, ...], bool]:
    """``(result, sort_keys, more)`` of ``query`` on a typed store view (reads only)."""
    if isinstance(query, KeyQuery):
        return store.get(query.key), (), False
    if isinstance(query, RangeQuery):
        return _range(store, name, query)
    if isinstance(query, SessionQuery):
        earliest = 0 if query.earliest_session_end is None else query.earliest_session_end
        latest = _MAX_TIME if query.latest_session_start is None else query.latest_session_start
        sessions = store.find_sessions(query.key, earliest, latest)
        return sessions[:query.limit], (), len(sessions) > query.limit
    if isinstance(query, VersionedKeyQuery):
        return store.get(query.key, query.as_of), (), False
    if isinstance(query, MultiVersionedKeyQuery):
        versions = store.get_versions(query.key, query.from_time, query.to_time, ascending=query.ascending)
        return versions[:query.limit], (), len(versions) > query.limit
    raise InvalidQueryError(f"unknown query type {type(query).__name__}")


def _range(store: Any, name: str, query: RangeQuery) -> tuple[list[KeyValue], tuple[str, ...], bool]:
    """One page of a key-value range: read the byte store under the typed view (what the
    processors see), starting after the continuation key, one record past the limit to
    know whether more follow."""
    serde = store.key_serde
    lower = None if query.lower is None else serialize_key(serde, name, query.lower)
    upper = None if query.upper is None else serialize_key(serde, name, query.upper)
    after = None if query.continuation is None else bytes.fromhex(query.continuation)
    if after is not None:
        if query.descending:
            upper = after if upper is None else min(upper, after)
        else:
            lower = after if lower is None else max(lower, after)
    if lower is not None and upper is not None and lower > upper:
        return [], (), False
    rows: Iterator[tuple[bytes, bytes]] = (store.inner.reverse_range if query.descending
                                           else store.inner.range)(lower, upper)
    page: list[tuple[bytes, bytes]] = []
    for key, value in rows:
        if key == after:
            continue
        if len(page) == query.limit:
            return _decoded(store, page), tuple(k.hex() for k, _ in page), True
        page.append((key, value))
    return _decoded(store, page), tuple(k.hex() for k, _ in page), False


def _decoded(store: Any, rows: list[tuple[bytes, bytes]]) -> list[KeyValue]:
    kd, vd = store.key_serde.deserialize, store.value_serde.deserialize
    return [KeyValue(kd(k), vd(v)) for k, v in rows]
