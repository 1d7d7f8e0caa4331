"""The changelogging wrapper of versioned stores.

Changelog record: the record key, the value (None = tombstone), and the version's
timestamp (valid_from), also for NOT_PUT and expired deletes, as Kafka does.
"""

from __future__ import annotations

from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogWriter
from airflow_stateful_provider.streams.state.common.changelogging import ChangeloggingStore
from airflow_stateful_provider.streams.state.versioned.store import VersionedKeyValueStore, VersionedRecord

__all__ = ["ChangeloggingVersionedKeyValueStore"]


class ChangeloggingVersionedKeyValueStore(ChangeloggingStore):
    """Versioned store whose writes are also sent to the changelog with the version's timestamp
    (also for NOT_PUT and expired deletes, as Kafka does)."""

    reads = ("get", "get_versions", "approximate_num_entries")

    def __init__(self, inner: VersionedKeyValueStore, writer: ChangelogWriter) -> None:
        super().__init__(inner, writer)
        self._inner_put = inner.put
        self._send = writer.send

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        result: int = self._inner_put(key, value, timestamp)
        self._send(key, value, timestamp)
        return result

    def delete(self, key: bytes, timestamp: int) -> VersionedRecord[bytes] | None:
        existing: VersionedRecord[bytes] | None = self.inner.delete(key, timestamp)
        self._send(key, None, timestamp)
        return existing
