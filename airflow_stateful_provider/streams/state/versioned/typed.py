"""The typed view of versioned stores, as processors see them (common/typed.py)."""

from __future__ import annotations

from typing import Any

from airflow_stateful_provider.streams.state.common.typed import TypedStore
from airflow_stateful_provider.streams.state.versioned.store import VersionedKeyValueStore, VersionedRecord

__all__ = ["TypedVersionedKeyValueStore"]


class TypedVersionedKeyValueStore(TypedStore[VersionedKeyValueStore]):
    """``VersionedKeyValueStore<K, V>`` (docs/semantics.md §5): put returns valid_to, -1 when the
    new version is the newest, or NOT_PUT (the store's constant) when older than history
    retention; get(key[, as_of]) and get_versions return :class:`VersionedRecord`."""

    __slots__ = ()

    def put(self, key: Any, value: Any, timestamp: int) -> int:
        return self.inner.put(self._key(key), self._value(value), timestamp)

    def delete(self, key: Any, timestamp: int) -> VersionedRecord[Any] | None:
        return self._record(self.inner.delete(self._key(key), timestamp))

    def get(self, key: Any, as_of: int | None = None) -> VersionedRecord[Any] | None:
        raw_key = self._key(key)
        found = self.inner.get(raw_key) if as_of is None else self.inner.get(raw_key, as_of)
        return self._record(found)

    def get_versions(
        self, key: Any, from_time: int | None = None, to_time: int | None = None, ascending: bool = False
    ) -> list[VersionedRecord[Any]]:
        kwargs: dict[str, Any] = {"ascending": ascending}
        if from_time is not None:
            kwargs["from_time"] = from_time
        if to_time is not None:
            kwargs["to_time"] = to_time
        return [self._typed(r) for r in self.inner.get_versions(self._key(key), **kwargs)]

    def _record(self, found: Any) -> VersionedRecord[Any] | None:
        return None if found is None else self._typed(found)

    def _typed(self, found: Any) -> VersionedRecord[Any]:
        valid_to = getattr(found, "valid_to", None)
        if valid_to is not None and valid_to < 0:
            valid_to = None
        return VersionedRecord(self._out(found.value), found.timestamp, valid_to)
