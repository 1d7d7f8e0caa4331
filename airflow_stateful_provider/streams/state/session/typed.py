"""The typed view of session stores, as processors see them (common/typed.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from airflow_stateful_provider.streams.errors import InvalidRecordError
from airflow_stateful_provider.streams.processor import KeyValue
from airflow_stateful_provider.streams.state.common.typed import TypedStore
from airflow_stateful_provider.streams.state.session.key import SessionKey
from airflow_stateful_provider.streams.state.session.store import SessionStore
from airflow_stateful_provider.streams.windows import Windowed, trusted_windowed

__all__ = ["TypedSessionStore"]


class TypedSessionStore(TypedStore[SessionStore]):
    """``SessionStore<K, AGG>`` with :class:`Windowed` keys. Results are lists of
    ``KeyValue(Windowed(key, SessionWindow(start, end)), aggregate)`` in store order
    (by end, then start, for one key)."""

    __slots__ = ()

    def _sessions(self, rows: Iterable[tuple[Any, bytes]]) -> list[KeyValue]:
        kd, vd = self._kd, self._vd
        return [KeyValue(trusted_windowed(kd(s.key), s.start, s.end), vd(agg)) for s, agg in rows]

    def _session_key(self, windowed: Windowed[Any]) -> tuple[bytes, int, int]:
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

    def put(self, windowed: Windowed[Any], aggregate: Any) -> None:
        self.inner.put(self._raw_session(windowed), self._value(aggregate))

    def remove(self, windowed: Windowed[Any]) -> None:
        self.inner.remove(self._raw_session(windowed))

    def all(self) -> list[KeyValue]:
        return self._sessions(self.inner.all())

    def set_flush_listener(self, listener: Callable[[Windowed[Any], Any, Any], None]) -> bool:
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

    def _raw_session(self, windowed: Windowed[Any]) -> SessionKey:
        return SessionKey(*self._session_key(windowed))
