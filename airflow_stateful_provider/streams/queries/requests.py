"""What an interactive query asks: the query types, positions and the request around them.

The names follow Kafka Streams' IQv2 (``StateQueryRequest``, ``KeyQuery``, ``RangeQuery``,
``VersionedKeyQuery``, ``MultiVersionedKeyQuery``, ``Position``, ``PositionBound``) in
snake_case; ``SessionQuery`` is what Kafka Streams spells ``WindowRangeQuery.withKey`` on a
session store. Everything here is plain data that travels as JSON on the query topics
(docs/interactive-queries.md): keys are given as objects and serialized by the store's own
key serde where the store lives, so a remote caller needs no serdes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from airflow_stateful_provider.streams.errors import InvalidQueryError

__all__ = [
    "DEFAULT_LIMIT", "MAX_LIMIT", "KeyQuery", "MultiVersionedKeyQuery", "Position", "PositionBound", "Query",
    "RangeQuery", "SessionQuery", "StateQueryRequest", "VersionedKeyQuery", "query_from_dict",
]

#: Records a range, session or versions query returns per call unless it asks for fewer.
DEFAULT_LIMIT = 100
#: The most records one call may return (a remote answer stays well below a Kafka message).
MAX_LIMIT = 1_000


def _limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise InvalidQueryError(f"limit must be an int in 1..{MAX_LIMIT}, got {value!r}; page with the "
                                f"continuation token instead of raising it")
    return value


def _time(value: Any, what: str, *, nullable: bool = True) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidQueryError(f"{what} must be an epoch-ms int >= 0{' or None' if nullable else ''}, got {value!r}")
    return value


def _key(value: Any) -> Any:
    if value is None:
        raise InvalidQueryError("a query key cannot be None")
    return value


class Query:
    """A query type: which store kinds answer it, and its JSON form."""

    #: The store kinds (``StoreKind.name``) that answer it.
    kinds: ClassVar[tuple[str, ...]] = ()
    #: Its name on the query topics.
    type_name: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type_name, **dataclasses.asdict(self)}  # type: ignore[call-overload]


@dataclasses.dataclass(frozen=True)
class KeyQuery(Query):
    """The value of one key in a key-value store (None when absent)."""

    key: Any
    kinds: ClassVar[tuple[str, ...]] = ("key_value",)
    type_name: ClassVar[str] = "key"

    @classmethod
    def with_key(cls, key: Any) -> KeyQuery:
        return cls(_key(key))


@dataclasses.dataclass(frozen=True)
class RangeQuery(Query):
    """Entries of a key-value store with ``lower <= key <= upper`` (None: open), in the order
    of the serialized keys (descending with ``descending``), at most ``limit`` per call; a
    result with more to read carries a ``continuation`` token to pass back here."""

    lower: Any = None
    upper: Any = None
    descending: bool = False
    limit: int = DEFAULT_LIMIT
    continuation: str | None = None
    kinds: ClassVar[tuple[str, ...]] = ("key_value",)
    type_name: ClassVar[str] = "range"

    def __post_init__(self) -> None:
        _limit(self.limit)
        if not isinstance(self.descending, bool):
            raise InvalidQueryError(f"descending must be a bool, got {self.descending!r}")
        if self.continuation is not None:
            try:
                bytes.fromhex(self.continuation)
            except (TypeError, ValueError):
                raise InvalidQueryError(f"continuation token must be the hex string a range result gave, got "
                                        f"{self.continuation!r}") from None

    @classmethod
    def with_range(cls, lower: Any, upper: Any) -> RangeQuery:
        return cls(lower, upper)

    @classmethod
    def with_lower_bound(cls, lower: Any) -> RangeQuery:
        return cls(lower, None)

    @classmethod
    def with_upper_bound(cls, upper: Any) -> RangeQuery:
        return cls(None, upper)

    @classmethod
    def with_no_bounds(cls) -> RangeQuery:
        return cls()

    def with_descending_keys(self) -> RangeQuery:
        return dataclasses.replace(self, descending=True)

    def with_limit(self, limit: int) -> RangeQuery:
        return dataclasses.replace(self, limit=limit)

    def with_continuation(self, token: str | None) -> RangeQuery:
        return dataclasses.replace(self, continuation=token)


@dataclasses.dataclass(frozen=True)
class SessionQuery(Query):
    """Sessions of one key in a session store, those with ``end >= earliest_session_end``
    and ``start <= latest_session_start`` (None: every session), at most ``limit``."""

    key: Any
    earliest_session_end: int | None = None
    latest_session_start: int | None = None
    limit: int = DEFAULT_LIMIT
    kinds: ClassVar[tuple[str, ...]] = ("session",)
    type_name: ClassVar[str] = "session"

    def __post_init__(self) -> None:
        _time(self.earliest_session_end, "earliest_session_end")
        _time(self.latest_session_start, "latest_session_start")
        _limit(self.limit)

    @classmethod
    def with_key(cls, key: Any) -> SessionQuery:
        return cls(_key(key))

    @classmethod
    def with_key_and_time_range(cls, key: Any, earliest_session_end: int, latest_session_start: int) -> SessionQuery:
        return cls(_key(key), earliest_session_end, latest_session_start)


@dataclasses.dataclass(frozen=True)
class VersionedKeyQuery(Query):
    """The version of one key valid at ``as_of`` (None: the latest) in a versioned store."""

    key: Any
    as_of: int | None = None
    kinds: ClassVar[tuple[str, ...]] = ("versioned",)
    type_name: ClassVar[str] = "versioned_key"

    def __post_init__(self) -> None:
        _time(self.as_of, "as_of")

    @classmethod
    def with_key(cls, key: Any) -> VersionedKeyQuery:
        return cls(_key(key))

    def as_of_timestamp(self, as_of: int) -> VersionedKeyQuery:
        return dataclasses.replace(self, as_of=as_of)


@dataclasses.dataclass(frozen=True)
class MultiVersionedKeyQuery(Query):
    """The versions of one key valid at some time in ``[from_time, to_time]`` (None: open),
    newest first unless ``ascending``, at most ``limit``."""

    key: Any
    from_time: int | None = None
    to_time: int | None = None
    ascending: bool = False
    limit: int = DEFAULT_LIMIT
    kinds: ClassVar[tuple[str, ...]] = ("versioned",)
    type_name: ClassVar[str] = "versions"

    def __post_init__(self) -> None:
        _time(self.from_time, "from_time")
        _time(self.to_time, "to_time")
        _limit(self.limit)

    @classmethod
    def with_key(cls, key: Any) -> MultiVersionedKeyQuery:
        return cls(_key(key))

    def from_timestamp(self, from_time: int) -> MultiVersionedKeyQuery:
        return dataclasses.replace(self, from_time=from_time)

    def to_timestamp(self, to_time: int) -> MultiVersionedKeyQuery:
        return dataclasses.replace(self, to_time=to_time)

    def with_ascending_timestamps(self) -> MultiVersionedKeyQuery:
        return dataclasses.replace(self, ascending=True)


_QUERY_TYPES: dict[str, type[Query]] = {
    q.type_name: q for q in (KeyQuery, RangeQuery, SessionQuery, VersionedKeyQuery, MultiVersionedKeyQuery)}


def query_from_dict(data: Any) -> Query:
    """The query a :meth:`Query.to_dict` made (the query topics' JSON)."""
    if not isinstance(data, Mapping) or data.get("type") not in _QUERY_TYPES:
        raise InvalidQueryError(f"query must be an object with 'type' one of {sorted(_QUERY_TYPES)}, got {data!r:.200}")
    cls = _QUERY_TYPES[data["type"]]
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    try:
        return cls(**{k: v for k, v in data.items() if k in fields})
    except TypeError as exc:
        raise InvalidQueryError(f"{data['type']} query {data!r:.200}: {exc}") from None


@dataclasses.dataclass(frozen=True)
class Position:
    """How far a replica's state is: per input topic and partition, the offset of the last
    record it processed (Kafka Streams' ``Position``)."""

    offsets: Mapping[str, Mapping[int, int]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, offsets: Mapping[Any, int]) -> Position:
        """From ``{(topic, partition): offset}`` (any pair-like key, TopicPartition too)."""
        nested: dict[str, dict[int, int]] = {}
        for tp, offset in offsets.items():
            topic, partition = tuple(tp)
            nested.setdefault(str(topic), {})[int(partition)] = int(offset)
        return cls(nested)

    def offset(self, topic: str, partition: int) -> int | None:
        return self.offsets.get(topic, {}).get(partition)

    def dominates(self, other: Position, within: set[Any] | None = None) -> bool:
        """Whether this position is at or past ``other`` on every partition of ``other``
        (only those in ``within``, ``(topic, partition)`` pairs, when given); a partition
        this position does not know is not reached."""
        for topic, parts in other.offsets.items():
            for partition, offset in parts.items():
                if within is not None and (topic, partition) not in within:
                    continue
                mine = self.offset(topic, partition)
                if mine is None or mine < offset:
                    return False
        return True

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {topic: {str(p): o for p, o in sorted(parts.items())} for topic, parts in sorted(self.offsets.items())}

    @classmethod
    def from_dict(cls, data: Any) -> Position:
        try:
            return cls({str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in (data or {}).items()})
        except (AttributeError, TypeError, ValueError):
            raise InvalidQueryError(f"position must be {{topic: {{partition: offset}}}}, got {data!r:.200}") from None


@dataclasses.dataclass(frozen=True)
class PositionBound:
    """Read-your-writes: only a replica whose position dominates ``position`` may answer
    (unbounded: any replica allowed by the request)."""

    position: Position | None = None

    @classmethod
    def unbounded(cls) -> PositionBound:
        return cls(None)

    @classmethod
    def at(cls, position: Position) -> PositionBound:
        return cls(position)

    @property
    def is_unbounded(self) -> bool:
        return self.position is None


@dataclasses.dataclass(frozen=True)
class StateQueryRequest:
    """A query of one store: ``StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("u1"))``.

    Active replicas only, unless :meth:`with_stale_reads` allows standbys up to
    ``max_lag`` changelog records behind. ``partitions`` (None: every partition, or the
    key's partition for a keyed query) restricts which tasks answer.
    """

    store: str
    query: Query | None = None
    partitions: frozenset[int] | None = None
    position_bound: PositionBound = PositionBound()
    #: None: actives only; else standbys answer too when at most this many records behind.
    max_standby_lag: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.store, str) or not self.store:
            raise InvalidQueryError(f"store must be a non-empty store name, got {self.store!r}")

    @classmethod
    def in_store(cls, store: str) -> StateQueryRequest:
        return cls(store)

    def with_query(self, query: Query) -> StateQueryRequest:
        if not isinstance(query, Query):
            raise InvalidQueryError(f"with_query takes a KeyQuery, RangeQuery, SessionQuery, VersionedKeyQuery or "
                                    f"MultiVersionedKeyQuery, got {query!r:.100}")
        return dataclasses.replace(self, query=query)

    def with_partitions(self, partitions: set[int] | frozenset[int]) -> StateQueryRequest:
        if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in partitions):
            raise InvalidQueryError(f"partitions must be ints >= 0, got {sorted(partitions)!r}")
        return dataclasses.replace(self, partitions=frozenset(partitions))

    def with_position_bound(self, bound: PositionBound) -> StateQueryRequest:
        return dataclasses.replace(self, position_bound=bound)

    def with_stale_reads(self, max_lag: int) -> StateQueryRequest:
        if isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0:
            raise InvalidQueryError(f"max_lag must be an int >= 0 (changelog records), got {max_lag!r}")
        return dataclasses.replace(self, max_standby_lag=max_lag)

    def require_active(self) -> StateQueryRequest:
        return dataclasses.replace(self, max_standby_lag=None)

    @property
    def keyed(self) -> bool:
        """Whether the query names one key (answered by that key's partition only)."""
        return hasattr(self.query, "key")

    def checked_query(self) -> Query:
        if self.query is None:
            raise InvalidQueryError(f"request on store {self.store!r} has no query: call with_query(...)")
        return self.query

    def to_dict(self) -> dict[str, Any]:
        bound = self.position_bound.position
        return {"store": self.store, "query": self.checked_query().to_dict(),
                "partitions": None if self.partitions is None else sorted(self.partitions),
                "position_bound": None if bound is None else bound.to_dict(),
                "max_standby_lag": self.max_standby_lag}

    @classmethod
    def from_dict(cls, data: Any) -> StateQueryRequest:
        if not isinstance(data, Mapping):
            raise InvalidQueryError(f"request must be an object, got {data!r:.200}")
        store = data.get("store")
        if not isinstance(store, str):
            raise InvalidQueryError(f"request needs a store name, got {store!r:.100}")
        request = cls.in_store(store).with_query(query_from_dict(data.get("query")))
        if data.get("partitions") is not None:
            request = request.with_partitions(set(data["partitions"]))
        if data.get("position_bound") is not None:
            request = request.with_position_bound(PositionBound.at(Position.from_dict(data["position_bound"])))
        if data.get("max_standby_lag") is not None:
            request = request.with_stale_reads(data["max_standby_lag"])
        return request
