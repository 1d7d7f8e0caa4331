"""What the typed views of the byte stores share, as processors see them.

Stores hold bytes; processors work with objects. The typed views (Kafka Streams'
"metered" stores, minus metrics; one per kind, ``<kind>/typed.py``) serialize keys and
values with the store's serdes on the way in and deserialize on the way out. They add no
state of their own, so what a processor writes is exactly what the byte store (and its
changelog) holds.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from airflow_stateful_provider.streams.errors import InvalidRecordError
from airflow_stateful_provider.streams.serdes import Serde

__all__ = ["ByteStore", "TypedStore"]


class ByteStore(Protocol):
    """What every kind's byte store offers the typed view besides its own reads and writes."""

    @property
    def name(self) -> str: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


StoreT = TypeVar("StoreT", bound=ByteStore)


class TypedStore(Generic[StoreT]):
    """The serdes of a byte store and the lifecycle calls, passed through."""

    __slots__ = ("inner", "key_serde", "value_serde", "_ks", "_vs", "_kd", "_vd")

    def __init__(self, inner: StoreT, key_serde: Serde, value_serde: Serde) -> None:
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
