"""The changelogging wrapper of key-value stores.

Changelog record: the record key, the value (None = tombstone), and the timestamp
``timestamp_fn()`` gives (the record being processed; default: wall clock).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogWriter
from airflow_stateful_provider.streams.state.common.changelogging import ChangeloggingStore
from airflow_stateful_provider.streams.state.keyvalue.store import KeyValueStore

__all__ = ["ChangeloggingKeyValueStore"]


class ChangeloggingKeyValueStore(ChangeloggingStore):
    """Key-value store whose writes are also sent to the changelog (timestamp from
    ``timestamp_fn``, default: wall clock)."""

    reads = ("get", "range", "reverse_range", "all", "reverse_all", "approximate_num_entries")

    def __init__(
        self, inner: KeyValueStore, writer: ChangelogWriter, timestamp_fn: Callable[[], int] | None = None
    ) -> None:
        super().__init__(inner, writer)
        self.timestamp_fn = timestamp_fn or wall_clock_ms
        self._inner_put = inner.put
        self._send = writer.send

    def put(self, key: bytes, value: bytes | None) -> None:
        self._inner_put(key, value)
        self._send(key, value, self.timestamp_fn())

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        existing: bytes | None = self.inner.get(key)
        if existing is None:
            self.put(key, value)
        return existing

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
