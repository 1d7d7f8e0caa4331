"""The query topics: their names and the JSON of a remote query and its answers.

``<application_id>-queries`` carries requests, ``<application_id>-query-answers`` the
answers; both have 1 partition and a short retention (queries are not state). A request
names its application and a deadline; each instance holding a replica of the asked
partitions answers with one message keyed by the request id (docs/interactive-queries.md).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

from airflow_stateful_provider.streams.errors import InvalidQueryError
from airflow_stateful_provider.streams.queries.requests import StateQueryRequest
from airflow_stateful_provider.streams.queries.results import QueryResult

__all__ = ["MAX_ANSWER_BYTES", "QUERY_TOPIC_CONFIG", "QueryAnswer", "RemoteQuery", "answers_topic_name",
           "queries_topic_name"]

FORMAT_VERSION = 1
#: An answer larger than this is refused by the instance (lower the query's limit).
MAX_ANSWER_BYTES = 512 * 1024
#: A request larger than this is ignored by instances (keys are small).
MAX_REQUEST_BYTES = 64 * 1024
#: Topic configs of both query topics: an hour of retention, enough to debug a query.
QUERY_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "3600000",
                      "max.message.bytes": str(MAX_ANSWER_BYTES + 64 * 1024)}


def queries_topic_name(application_id: str) -> str:
    return f"{application_id}-queries"


def answers_topic_name(application_id: str) -> str:
    return f"{application_id}-query-answers"


def _decode(raw: bytes, what: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise InvalidQueryError(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidQueryError(f"{what} must be a JSON object, got {data!r:.100}")
    version = data.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise InvalidQueryError(f"{what} has format_version {version!r}; this engine reads up to {FORMAT_VERSION}")
    return data


@dataclasses.dataclass(frozen=True)
class RemoteQuery:
    """One request on ``<application_id>-queries``."""

    request_id: str
    application_id: str
    #: Epoch ms after which nobody answers it any more (the caller has given up).
    deadline_ms: int
    request: StateQueryRequest

    @classmethod
    def new(cls, application_id: str, request: StateQueryRequest, deadline_ms: int) -> RemoteQuery:
        return cls(f"query-{uuid.uuid4().hex[:16]}", application_id, deadline_ms, request)

    def to_json_bytes(self) -> bytes:
        return json.dumps({"format_version": FORMAT_VERSION, "request_id": self.request_id,
                           "application_id": self.application_id, "deadline_ms": self.deadline_ms,
                           "request": self.request.to_dict()}, separators=(",", ":")).encode()

    @classmethod
    def from_json_bytes(cls, raw: bytes) -> RemoteQuery:
        if len(raw or b"") > MAX_REQUEST_BYTES:
            raise InvalidQueryError(f"query request of {len(raw)} bytes is over the {MAX_REQUEST_BYTES} allowed")
        data = _decode(raw, "query request")
        request_id, application_id, deadline = (data.get("request_id"), data.get("application_id"),
                                                data.get("deadline_ms"))
        if not isinstance(request_id, str) or not isinstance(application_id, str) or not isinstance(deadline, int):
            raise InvalidQueryError(f"query request needs string request_id and application_id and int deadline_ms, "
                                    f"got {data!r:.200}")
        return cls(request_id, application_id, deadline, StateQueryRequest.from_dict(data.get("request")))


@dataclasses.dataclass(frozen=True)
class QueryAnswer:
    """One instance's answer on ``<application_id>-query-answers``: its results for the
    asked partitions it holds, or the error that refused the whole request."""

    request_id: str
    instance_id: str
    #: Every partition the request targets (the caller waits for an answer for each).
    partitions: tuple[int, ...] = ()
    results: tuple[QueryResult, ...] = ()
    #: ``(error class name, message)`` when the request was refused.
    error: tuple[str, str] | None = None
    #: WrongStoreKindError: the store's kind.
    store_kind: str = ""

    def to_json_bytes(self) -> bytes:
        return json.dumps({"format_version": FORMAT_VERSION, "request_id": self.request_id,
                           "instance_id": self.instance_id, "partitions": list(self.partitions),
                           "results": [r.to_dict() for r in self.results],
                           "error": None if self.error is None else {"type": self.error[0], "message": self.error[1],
                                                                    "store_kind": self.store_kind}},
                          separators=(",", ":"), default=repr).encode()

    @classmethod
    def from_json_bytes(cls, raw: bytes) -> QueryAnswer:
        data = _decode(raw, "query answer")
        error = data.get("error")
        try:
            return cls(str(data["request_id"]), str(data["instance_id"]),
                       tuple(int(p) for p in data.get("partitions") or ()),
                       tuple(QueryResult.from_dict(r) for r in data.get("results") or ()),
                       None if error is None else (str(error["type"]), str(error["message"])),
                       "" if error is None else str(error.get("store_kind") or ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidQueryError(f"malformed query answer {data!r:.200}: {exc!r}") from None
