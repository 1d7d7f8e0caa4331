"""Queries of one instance's own stores: resolve a request against the topology, hand it
to every stream thread (answering.py), gather the best answer per partition.

``KafkaStreams.query`` and the query responder (responder.py) both come here, so a local
and a remote caller get the same answers and the same errors.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import (
    InvalidQueryError,
    QueryTimeoutError,
    UnknownStoreError,
    WrongStoreKindError,
)
from airflow_stateful_provider.streams.queries.answering import (
    QueryTarget,
    answer_on_thread,
    key_partition,
    serialize_key,
)
from airflow_stateful_provider.streams.queries.requests import StateQueryRequest
from airflow_stateful_provider.streams.queries.results import (
    NOT_OWNED,
    KeyQueryMetadata,
    StateQueryResult,
    best_results,
    failed,
)
from airflow_stateful_provider.streams.serdes import resolve_serde
from airflow_stateful_provider.streams.status.document import InstanceStatus
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["key_metadata", "query_threads", "resolve_target"]


def _store_subtopology(topology: Topology, store: str) -> int:
    for sub in topology.subtopologies():
        if store in sub.store_names:
            return sub.id
    raise UnknownStoreError(f"application has no store {store!r}; its stores are {sorted(topology.store_names)}")


def _key_partition(topology: Topology, config: StreamsConfig, store: str, key: Any, partitions: int) -> int:
    builder = topology.store_builder(store)
    serde = resolve_serde(builder.key_serde, config.default_key_serde, f"key serde of store {store!r}")
    return key_partition(serialize_key(serde, store, key), partitions)


def resolve_target(topology: Topology, config: StreamsConfig, task_counts: Mapping[int, int],
                   request: StateQueryRequest, instance_id: str) -> QueryTarget:
    """Check the request against the topology (store, kind, key, partitions) before any
    thread sees it; a keyed query goes to its key's partition only."""
    query = request.checked_query()
    subtopology = _store_subtopology(topology, request.store)
    kind = topology.store_builder(request.store).kind.name
    if kind not in query.kinds:
        raise WrongStoreKindError(f"store {request.store!r} is a {kind} store; a {type(query).__name__} needs a "
                                  f"{' or '.join(query.kinds)} store", kind=kind)
    count = task_counts.get(subtopology)
    if count is None:
        raise InvalidQueryError(f"the partitions of store {request.store!r} are not known before the instance starts")
    if request.keyed:
        key = query.key  # type: ignore[attr-defined]
        partitions = frozenset({_key_partition(topology, config, request.store, key, count)})
        if request.partitions is not None:
            partitions &= request.partitions
    elif request.partitions is not None:
        unknown = sorted(p for p in request.partitions if p >= count)
        if unknown:
            raise InvalidQueryError(f"store {request.store!r} has partitions 0..{count - 1}, not {unknown}")
        partitions = request.partitions
    else:
        partitions = frozenset(range(count))
    return QueryTarget(request, subtopology, partitions, instance_id)


def query_threads(threads: Iterable[Any], target: QueryTarget, timeout: float) -> StateQueryResult:
    """Answer on every stream thread (see answering.py); a partition no thread holds fails
    "not_owned". Raises QueryTimeoutError when a thread does not reach its next safe point
    within ``timeout`` seconds (a long rebalance)."""
    futures: list[Future] = [thread.run_at_safe_point(lambda t: answer_on_thread(t, target)) for thread in threads]
    deadline = time.monotonic() + timeout
    answers = []
    for future in futures:
        try:
            answers += future.result(max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            for pending in futures:
                pending.cancel()
            raise QueryTimeoutError(f"instance {target.instance_id}: a stream thread did not reach a safe point "
                                    f"within {timeout} s to answer the query on store {target.request.store!r} "
                                    f"(the group may be rebalancing); retry") from None
    best = best_results(answers)
    for partition in target.partitions - set(best):
        task_id = str(TaskId(target.subtopology, partition))
        best[partition] = failed(partition, task_id, target.instance_id, NOT_OWNED,
                                 f"instance {target.instance_id} holds no "
                                 f"{'replica' if target.request.max_standby_lag is not None else 'active task'} of "
                                 f"task {task_id} (store {target.request.store!r}); query_metadata_for_key names "
                                 f"its owner, or query the application remotely")
    return StateQueryResult(target.request.store, target.request.checked_query(), dict(sorted(best.items())))


def key_metadata(topology: Topology, config: StreamsConfig, task_counts: Mapping[int, int], store: str, key: Any,
                 documents: Mapping[str, InstanceStatus]) -> KeyQueryMetadata:
    """Where ``key`` of ``store`` lives, from the instances' status documents."""
    subtopology = _store_subtopology(topology, store)
    count = task_counts.get(subtopology)
    if count is None:
        raise InvalidQueryError(f"the partitions of store {store!r} are not known before the instance starts")
    partition = _key_partition(topology, config, store, key, count)
    task_id = str(TaskId(subtopology, partition))
    active, standbys = None, []
    for instance_id, document in sorted(documents.items()):
        for task in document.tasks:
            if task.task_id != task_id:
                continue
            if task.role == "active":
                active = instance_id
            elif task.role == "standby":
                standbys.append(instance_id)
    return KeyQueryMetadata(store, partition, task_id, active, tuple(standbys))
