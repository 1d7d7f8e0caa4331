"""Changelogging: every write to a logged store also goes to its changelog topic.

A wrapper per store type forwards each write to the inner store and hands
``(key bytes, value bytes or None, timestamp)`` to a :class:`ChangelogWriter`
(the runtime's producer to ``<application_id>-<store>-changelog``). Restoring is
the inverse: ``restore_batch(records)`` on the store replays changelog records,
in one RocksDB write batch for persistent stores.

Changelog record formats (None value = tombstone):

=========== ======================================= ============================== ==========================
store       key                                     value                          record timestamp
=========== ======================================= ============================== ==========================
key-value   record key                              value                          ``timestamp_fn()`` (the
                                                                                   record being processed)
session     record key + end (8 B BE) + start (8 B) aggregate                      ``timestamp_fn()``, else
                                                                                   the session end
versioned   record key                              value                          the version's timestamp
                                                                                   (valid_from)
=========== ======================================= ============================== ==========================

Kafka Streams logs a write even when the store drops it (an expired session
segment, a versioned put older than history retention): restoring then skips it
again, so the changelog reproduces the store exactly.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogWriter
from airflow_stateful_provider.streams.state.keyvalue import KeyValueStore
from airflow_stateful_provider.streams.state.session import SessionStore
from airflow_stateful_provider.streams.state.session_key import SessionKey, as_session_key
from airflow_stateful_provider.streams.state.versioned import VersionedKeyValueStore, VersionedRecord

__all__ = [
    "ChangeloggingKeyValueStore",
    "ChangeloggingSessionStore",
    "ChangeloggingVersionedKeyValueStore",
]

_TS2_PACK = struct.Struct(">qq").pack

# Read methods bound directly on the wrapper (no __getattr__ detour on hot paths).
_READS = (
    "get",
    "range",
    "reverse_range",
    "all",
    "reverse_all",
    "approximate_num_entries",
    "find_sessions",
    "backward_find_sessions",
    "find_sessions_by_end",
    "fetch",
    "backward_fetch",
    "fetch_session",
    "get_versions",
)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class _Delegating:
    """Reads, lifecycle and maintenance pass straight to the inner store."""

    def __init__(self, inner: Any, writer: ChangelogWriter) -> None:
        if not callable(getattr(writer, "send", None)):
            raise ConfigError(f"changelog writer must have send(key, value, timestamp), got {writer!r}")
        self.inner = inner
        self.writer = writer
        for name in _READS:
            method = getattr(inner, name, None)
            if method is not None:
                setattr(self, name, method)

    def __getattr__(self, name: str) -> Any:
        # reads (get, range, find_sessions, get_versions, ...), flush, close, stats,
        # compact, enforce_retention, restore_batch: the changelog is not involved
        return getattr(self.inner, name)

    @property
    def name(self) -> str:
        return self.inner.name  # type: ignore[no-any-return]

    @property
    def persistent(self) -> bool:
        return self.inner.persistent  # type: ignore[no-any-return]

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


class ChangeloggingKeyValueStore(_Delegating):
    """Key-value store whose writes are also sent to the changelog (timestamp from
    ``timestamp_fn``, default: wall clock)."""

    def __init__(
        self, inner: KeyValueStore, writer: ChangelogWriter, timestamp_fn: Callable[[], int] | None = None
    ) -> None:
        super().__init__(inner, writer)
        self.timestamp_fn = timestamp_fn or _wall_clock_ms
        self._inner_put = inner.put
        self._send = writer.send

    def put(self, key: bytes, value: bytes | None) -> None:
        self._inner_put(key, value)
        self._send(key, value, self.timestamp_fn())

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        existing = self.inner.get(key)
        if existing is None:
            self.put(key, value)
        return existing  # type: ignore[no-any-return]

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        entries = list(entries)
        self.inner.put_all(entries)
        timestamp = self.timestamp_fn()
        send = self._send
        for key, value in entries:
            send(key, value, timestamp)

    def delete(self, key: bytes) -> bytes | None:
        existing = self.inner.delete(key)
        self._send(key, None, self.timestamp_fn())
        return existing  # type: ignore[no-any-return]


class ChangeloggingSessionStore(_Delegating):
    """Session store whose writes are also sent to the changelog, keyed key + end + start.

    Record timestamp: ``timestamp_fn()`` when given (Kafka uses the timestamp of the record
    being processed), else the session end.
    """

    def __init__(
        self, inner: SessionStore, writer: ChangelogWriter, timestamp_fn: Callable[[], int] | None = None
    ) -> None:
        super().__init__(inner, writer)
        self.timestamp_fn = timestamp_fn
        self._inner_put = inner.put
        self._inner_remove = inner.remove
        self._send = writer.send

    def put(self, windowed: SessionKey, agg: bytes | None) -> None:
        if type(windowed) is not SessionKey:
            windowed = as_session_key(windowed)
        self._inner_put(windowed, agg)
        key, start, end = windowed
        self._send(key + _TS2_PACK(end, start), agg, end if self.timestamp_fn is None else self.timestamp_fn())

    def remove(self, windowed: SessionKey) -> None:
        if type(windowed) is not SessionKey:
            windowed = as_session_key(windowed)
        self._inner_remove(windowed)
        key, start, end = windowed
        self._send(key + _TS2_PACK(end, start), None, end if self.timestamp_fn is None else self.timestamp_fn())


class ChangeloggingVersionedKeyValueStore(_Delegating):
    """Versioned store whose writes are also sent to the changelog with the version's timestamp
    (also for NOT_PUT and expired deletes, as Kafka does)."""

    def __init__(self, inner: VersionedKeyValueStore, writer: ChangelogWriter) -> None:
        super().__init__(inner, writer)
        self._inner_put = inner.put
        self._send = writer.send

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        result: int = self._inner_put(key, value, timestamp)
        self._send(key, value, timestamp)
        return result

    def delete(self, key: bytes, timestamp: int) -> VersionedRecord | None:
        existing: VersionedRecord | None = self.inner.delete(key, timestamp)
        self._send(key, None, timestamp)
        return existing

