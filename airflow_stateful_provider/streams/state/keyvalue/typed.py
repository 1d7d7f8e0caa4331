"""The typed view of key-value stores, as processors see them (common/typed.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from airflow_stateful_provider.streams.processor import KeyValue
from airflow_stateful_provider.streams.state.common.typed import TypedStore
from airflow_stateful_provider.streams.state.keyvalue.store import KeyValueStore

__all__ = ["TypedKeyValueStore"]


class TypedKeyValueStore(TypedStore[KeyValueStore]):
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

    def set_expiry_listener(self, listener: Any) -> bool:
        """``listener(key, last value, expired at)`` (deserialized) for every key the store's
        time to live deletes (keyvalue/ttl.py); False when the store has no time to live."""
        register = getattr(self.inner, "set_expiry_listener", None)
        if register is None:
            return False
        kd, vd = self._kd, self._vd
        return bool(register(lambda key, value, at: listener(kd(key), vd(value), at)))

    def _iter(self, rows: Iterable[tuple[bytes, bytes]]) -> Iterator[KeyValue]:
        kd, vd = self._kd, self._vd
        for k, v in rows:
            yield KeyValue(kd(k), vd(v))

    def range(self, from_key: Any = None, to_key: Any = None) -> Iterator[KeyValue]:
        return self._iter(
            self.inner.range(None if from_key is None else self._key(from_key),
                             None if to_key is None else self._key(to_key))
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
