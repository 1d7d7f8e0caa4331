"""One lookup of a running application's store, as the CLI, the hook and DAG tasks ask it.

The caller names a store and a key (or a key range, or an as-of time) without knowing the
store's kind: a plain key is asked as a ``KeyQuery``, and when the instances say the store
is a versioned or session store, asked again as the query that fits (the latest version,
the key's sessions). The answer is JSON data with where it came from (instance, task,
partition, standby lag, position), so it can be printed, returned through XCom or logged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_stateful_provider.streams.errors import InvalidQueryError, WrongStoreKindError
from airflow_stateful_provider.streams.queries.remote import QueryClient
from airflow_stateful_provider.streams.queries.requests import (
    DEFAULT_LIMIT,
    KeyQuery,
    Query,
    RangeQuery,
    SessionQuery,
    StateQueryRequest,
    VersionedKeyQuery,
)
from airflow_stateful_provider.streams.queries.results import QueryResult, to_json_value

__all__ = ["DEFAULT_MAX_LAG", "lookup_store"]

#: Changelog records a standby may be behind when stale reads are allowed and no bound is given.
DEFAULT_MAX_LAG = 10_000

#: The query of one key that each store kind answers.
_KEY_QUERY_OF_KIND: dict[str, Any] = {"key_value": KeyQuery, "versioned": VersionedKeyQuery, "session": SessionQuery}


def lookup_store(bootstrap_servers: str | Sequence[str], application_id: str, store: str, key: Any = None, *,
                 key_range: tuple[Any, Any] | None = None, as_of: int | None = None, allow_stale: bool = False,
                 max_lag: int = DEFAULT_MAX_LAG, limit: int = DEFAULT_LIMIT, continuation: str | None = None,
                 timeout_ms: int = 10_000, client_configs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Ask ``store`` of the running ``application_id`` for ``key`` (its value, the version
    valid ``as_of``, or its sessions) or for the entries in ``key_range`` (inclusive; a
    None end is open), a page of ``limit`` at a time. Raises what query_application
    raises, and TaskNotAvailableError when the partition(s) could not answer."""
    if (key is None) == (key_range is None):
        raise InvalidQueryError("give either a key or a key range")
    if key_range is not None and as_of is not None:
        raise InvalidQueryError("as_of applies to one key of a versioned store, not to a range")

    with QueryClient(bootstrap_servers, application_id, timeout_ms=timeout_ms,
                     client_configs=client_configs) as client:

        def ask(query: Query) -> Any:
            request = StateQueryRequest.in_store(store).with_query(query)
            if allow_stale:
                request = request.with_stale_reads(max_lag)
            return client.query(request, timeout_ms=timeout_ms)

        return _lookup(ask, application_id, store, key, key_range, as_of, limit, continuation)


def _lookup(ask: Callable[[Query], Any], application_id: str, store: str, key: Any, key_range: tuple[Any, Any] | None,
            as_of: int | None, limit: int, continuation: str | None) -> dict[str, Any]:
    answer: dict[str, Any] = {"application_id": application_id, "store": store}
    if key_range is not None:
        result = ask(RangeQuery(key_range[0], key_range[1], limit=limit, continuation=continuation))
        answer.update(range=list(key_range), records=result.records(), continuation=result.continuation,
                      partitions={str(p): _source(r) for p, r in result.partition_results.items()})
        return answer
    query: Query = VersionedKeyQuery(key, as_of) if as_of is not None else KeyQuery.with_key(key)
    try:
        result = ask(query)
    except WrongStoreKindError as exc:
        if as_of is not None or exc.kind not in _KEY_QUERY_OF_KIND:
            raise
        result = ask(_KEY_QUERY_OF_KIND[exc.kind].with_key(key))
    one = result.only_partition_result()
    value = one.get_result()
    answer.update(key=key, found=value not in (None, []), value=to_json_value(value), **_source(one))
    if as_of is not None:
        answer["as_of"] = as_of
    return answer


def _source(result: QueryResult) -> dict[str, Any]:
    """Where a partition's answer came from."""
    return {"partition": result.partition, "task_id": result.task_id, "instance_id": result.instance_id,
            "standby": result.standby, "lag": result.lag, "position": result.position.to_dict()}
