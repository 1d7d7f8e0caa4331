"""The changelogging wrapper of session stores.

Changelog record: key = record key + end (8 bytes BE) + start (8 bytes BE), value = the
aggregate (None = tombstone), timestamp = ``timestamp_fn()`` (the record being processed),
else the session end.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogWriter
from airflow_stateful_provider.streams.state.common.changelogging import ChangeloggingStore
from airflow_stateful_provider.streams.state.session.key import SessionKey, as_session_key
from airflow_stateful_provider.streams.state.session.store import SessionStore

__all__ = ["ChangeloggingSessionStore"]

_TS2_PACK = struct.Struct(">qq").pack


class ChangeloggingSessionStore(ChangeloggingStore):
    """Session store whose writes are also sent to the changelog, keyed key + end + start.

    Record timestamp: ``timestamp_fn()`` when given (Kafka uses the timestamp of the record
    being processed), else the session end.
    """

    reads = ("find_sessions", "backward_find_sessions", "find_sessions_by_end", "fetch", "backward_fetch",
             "fetch_session", "all")

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
