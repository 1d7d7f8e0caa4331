"""Typed views of the byte stores, as processors see them.

Stores hold bytes; processors work with objects. These facades (Kafka Streams'
"metered" stores, minus metrics) serialize keys and values with the store's serdes
on the way in and deserialize on the way out. They add no state of their own, so
what a processor writes is exactly what the byte store (and its changelog) holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from airflow_stateful_provider.streams.errors import InvalidRecordError
from airflow_stateful_provider.streams.processor import KeyValue
from airflow_stateful_provider.streams.state.session_key import SessionKey
from airflow_stateful_provider.streams.windows import Windowed, trusted_windowed

__all__ = [
    "TypedKeyValueStore",
    "TypedSessionStore",
    "TypedVersionedKeyValueStore",
    "VersionedRecord",
]

V = TypeVar("V")


class _Typed:
    __slots__ = ("inner", "key_serde", "value_serde", "_ks", "_vs", "_kd", "_vd")

    def __init__(self, inner: Any, key_serde: Any, value_serde: Any) -> None:
        self.inner = inner
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._ks = key_serde.serialize
        self._vs = value_serde.serialize
        self._kd = key_serde.deserialize
        self._vd = value_serde.deserialize

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def persistent(self) -> bool:
        return bool(getattr(self.inner, "persistent", False))

    def _key(self, key: Any) -> bytes:
        if key is None:
            raise InvalidRecordError(f"store {self.name!r}: key cannot be None")
        data = self._ks(key)
        if data is None:
            raise InvalidRecordError(f"store {self.name!r}: key serde {self.key_serde!r} returned None for {key!r}")
        return data

    def _value(self, value: Any) -> bytes | None:
        return None if value is None else self._vs(value)

    def _out(self, data: bytes | None) -> Any:
        return None if data is None else self._vd(data)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, item: str) -> Any:
        # Maintenance and introspection (stats, enforce_retention, compact, ...) pass through.
        return getattr(self.inner, item)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


class TypedKeyValueStore(_Typed):
    """``KeyValueStore<K, V>``: get, put (None deletes), put_if_absent, put_all, delete,
    range/all (ordered by serialized key bytes), approximate_num_entries."""

    __slots__ = ()

    def get(self, key: Any) -> Any:
        return self._out(self.inner.get(self._key(key)))

    def put(self, key: Any, value: Any) -> None:
        self.inner.put(self._key(key), self._value(value))

    def put_if_absent(self, key: Any, value: Any) -> Any:
        return self._out(self.inner.put_if_absent(self._key(key), self._value(value)))

    def put_all(self, entries: Iterable[tuple[Any, Any]]) -> None:
        self.inner.put_all([(self._key(k), self._value(v)) for k, v in entries])

    def delete(self, key: Any) -> Any:
        return self._out(self.inner.delete(self._key(key)))

    def _iter(self, rows: Iterable[tuple[bytes, bytes]]) -> Iterator[KeyValue]:
        kd, vd = self._kd, self._vd
        for k, v in rows:
            yield KeyValue(kd(k), vd(v))

    def range(self, from_key: Any = None, to_key: Any = None) -> Iterator[KeyValue]:
        return self._iter(
            self.inner.range(None if from_key is None else self._key(from_key), None if to_key is None else self._key(to_key))
        )

    def reverse_range(self, from_key: Any = None, to_key: Any = None) -> Iterator[KeyValue]:
        return self._iter(
            self.inner.reverse_range(
                None if from_key is None else self._key(from_key), None if to_key is None else self._key(to_key)
            )
        )

    def all(self) -> Iterator[KeyValue]:
        return self._iter(self.inner.all())

    def reverse_all(self) -> Iterator[KeyValue]:
        return self._iter(self.inner.reverse_all())

    def approximate_num_entries(self) -> int:
        return self.inner.approximate_num_entries()


class TypedSessionStore(_Typed):
    """``SessionStore<K, AGG>`` with :class:`Windowed` keys. Results are lists of
    ``KeyValue(Windowed(key, SessionWindow(start, end)), aggregate)`` in store order
    (by end, then start, for one key)."""

    __slots__ = ()

    def _sessions(self, rows: Iterable[tuple[Any, bytes]]) -> list[KeyValue]:
        kd, vd = self._kd, self._vd
        return [KeyValue(trusted_windowed(kd(s.key), s.start, s.end), vd(agg)) for s, agg in rows]

    def _session_key(self, windowed: Windowed) -> tuple[bytes, int, int]:
        if not isinstance(windowed, Windowed):
            raise InvalidRecordError(f"store {self.name!r}: session keys must be Windowed, got {windowed!r}")
        return (self._key(windowed.key), windowed.window.start, windowed.window.end)

    def find_sessions(self, key: Any, earliest_session_end: int, latest_session_start: int) -> list[KeyValue]:
        """Sessions of ``key`` with end >= earliest_session_end and start <= latest_session_start."""
        rows = self.inner.find_sessions(self._key(key), earliest_session_end, latest_session_start)
        vd = self._vd
        # every row is of this very key: reuse it instead of deserializing it per session
        return [KeyValue(trusted_windowed(key, s.start, s.end), vd(agg)) for s, agg in rows]

    def backward_find_sessions(self, key: Any, earliest_session_end: int, latest_session_start: int) -> list[KeyValue]:
        return self._sessions(
            self.inner.backward_find_sessions(self._key(key), earliest_session_end, latest_session_start)
        )

    def find_sessions_by_end(self, earliest_session_end: int, latest_session_end: int) -> list[KeyValue]:
        """Sessions of every key with end in [earliest, latest] (emit on window close)."""
        return self._sessions(self.inner.find_sessions_by_end(earliest_session_end, latest_session_end))

    def fetch(self, key: Any) -> list[KeyValue]:
        return self._sessions(self.inner.fetch(self._key(key)))

    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        return self._out(self.inner.fetch_session(self._key(key), session_start, session_end))

    def put(self, windowed: Windowed, aggregate: Any) -> None:
        self.inner.put(self._raw_session(windowed), self._value(aggregate))

    def remove(self, windowed: Windowed) -> None:
        self.inner.remove(self._raw_session(windowed))

    def all(self) -> list[KeyValue]:
        return self._sessions(self.inner.all())

    def set_flush_listener(self, listener: Callable[[Windowed, Any, Any], None]) -> bool:
        """``listener(windowed, new, old)`` for each cached session written through.
        Returns False (and does nothing) when the store is not cached: then every
        update is written, and should be forwarded, at once."""
        set_listener = getattr(self.inner, "set_flush_listener", None)
        if set_listener is None:
            return False
        kd, vd = self._kd, self._vd

        def decode(session: SessionKey, new: bytes | None, old: bytes | None) -> None:
            listener(trusted_windowed(kd(session.key), session.start, session.end),
                     None if new is None else vd(new), None if old is None else vd(old))

        set_listener(decode)
        return True

    def _raw_session(self, windowed: Windowed) -> SessionKey:
        return SessionKey(*self._session_key(windowed))


@dataclasses.dataclass(frozen=True, slots=True)
class VersionedRecord(Generic[V]):
    """One version of a versioned store's value: valid from ``timestamp`` until
    ``valid_to`` (exclusive; None for the newest version)."""

    value: V
    timestamp: int
    valid_to: int | None = None


class TypedVersionedKeyValueStore(_Typed):
    """``VersionedKeyValueStore<K, V>`` (docs/semantics.md §5): put returns valid_to, -1 when the
    new version is the newest, or NOT_PUT (the store's constant) when older than history
    retention; get(key[, as_of]) and get_versions return :class:`VersionedRecord`."""

    __slots__ = ()

    def put(self, key: Any, value: Any, timestamp: int) -> int:
        return self.inner.put(self._key(key), self._value(value), timestamp)

    def delete(self, key: Any, timestamp: int) -> VersionedRecord | None:
        return self._record(self.inner.delete(self._key(key), timestamp))

    def get(self, key: Any, as_of: int | None = None) -> VersionedRecord | None:
        raw_key = self._key(key)
        found = self.inner.get(raw_key) if as_of is None else self.inner.get(raw_key, as_of)
        return self._record(found)

    def get_versions(
        self, key: Any, from_time: int | None = None, to_time: int | None = None, ascending: bool = False
    ) -> list[VersionedRecord]:
        kwargs: dict[str, Any] = {"ascending": ascending}
        if from_time is not None:
            kwargs["from_time"] = from_time
        if to_time is not None:
            kwargs["to_time"] = to_time
        return [self._record(r) for r in self.inner.get_versions(self._key(key), **kwargs)]  # type: ignore[misc]

    def _record(self, found: Any) -> VersionedRecord | None:
        if found is None:
            return None
        valid_to = getattr(found, "valid_to", None)
        if valid_to is not None and valid_to < 0:
            valid_to = None
        return VersionedRecord(self._out(found.value), found.timestamp, valid_to)
