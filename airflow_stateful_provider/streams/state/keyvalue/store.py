"""Key-value stores: the ``KeyValueStore`` protocol and what both implementations share.

Keys and values are bytes (serdes live above, in the runtime); keys sort as
unsigned bytes, like Kafka Streams' ``Bytes``. ``put(key, None)`` deletes, as in
Kafka Streams. Ranges are inclusive at both ends; ``None`` bounds are open.
The implementations: rocksdb.py and in_memory.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, runtime_checkable

from airflow_stateful_provider.streams.errors import InvalidRecordError
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.metadata import MetadataKind

__all__ = ["METADATA", "KeyValueStore", "KeyValueStoreBase", "bad_key", "bad_record", "bad_value"]

#: What the metadata of a key-value store directory holds: no settings besides the common fields.
METADATA = MetadataKind("keyvalue")


def bad_key(key: object) -> InvalidRecordError:
    if key is None:
        return InvalidRecordError("key cannot be null (None)")
    return InvalidRecordError(f"store keys must be bytes, got {type(key).__name__} {key!r:.80}")


def bad_record(record: ChangelogRecord) -> InvalidRecordError:
    return InvalidRecordError(
        f"changelog record at offset {record.offset} needs bytes key and bytes-or-None value, got "
        f"key {type(record.key).__name__} {record.key!r:.60}, value {type(record.value).__name__}"
    )


def bad_value(value: object) -> InvalidRecordError:
    return InvalidRecordError(f"store values must be bytes or None, got {type(value).__name__} {value!r:.80}")


@runtime_checkable
class KeyValueStore(Protocol):
    """Kafka Streams' ``KeyValueStore<Bytes, byte[]>`` in snake_case."""

    @property
    def name(self) -> str: ...


    @property
    def persistent(self) -> bool: ...

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes | None) -> None: ...

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None: ...

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None: ...

    def delete(self, key: bytes) -> bytes | None: ...

    def range(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]: ...

    def reverse_range(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]: ...

    def all(self) -> Iterator[tuple[bytes, bytes]]: ...

    def reverse_all(self) -> Iterator[tuple[bytes, bytes]]: ...

    def approximate_num_entries(self) -> int: ...

    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def _check_bound(bound: object, what: str) -> None:
    if bound is not None and type(bound) is not bytes:
        raise InvalidRecordError(f"{what} must be bytes or None, got {type(bound).__name__} {bound!r:.80}")


class KeyValueStoreBase:
    """The methods both implementations define the same way on top of ``get``/``put`` and
    their forward and backward scans (``_forward``/``_backward``: inclusive bounds, None
    for an open end)."""

    get: Callable[[bytes], bytes | None]
    put: Callable[[bytes, bytes | None], None]
    _check_open: Callable[[], None]
    _forward: Callable[[bytes | None, bytes | None], Iterator[tuple[bytes, bytes]]]
    _backward: Callable[[bytes | None, bytes | None], Iterator[tuple[bytes, bytes]]]

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        """Put only when ``key`` has no value; returns the existing value (None if it put)."""
        existing = self.get(key)
        if existing is None:
            self.put(key, value)
        return existing

    def delete(self, key: bytes) -> bytes | None:
        """Delete ``key``; returns the value it had."""
        existing = self.get(key)
        if existing is not None:
            self.put(key, None)
        return existing

    def _empty_range(self, from_key: bytes | None, to_key: bytes | None) -> bool:
        """Check the store is open and the bounds are bytes or None; True when from > to."""
        self._check_open()
        _check_bound(from_key, "from_key")
        _check_bound(to_key, "to_key")
        return from_key is not None and to_key is not None and from_key > to_key

    def range(self, from_key: bytes | None = None, to_key: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``from_key <= key <= to_key`` in key order; empty when from > to."""
        if self._empty_range(from_key, to_key):
            return iter(())
        return self._forward(from_key, to_key)

    def reverse_range(
        self, from_key: bytes | None = None, to_key: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Like :meth:`range`, in descending key order."""
        if self._empty_range(from_key, to_key):
            return iter(())
        return self._backward(from_key, to_key)

    def all(self) -> Iterator[tuple[bytes, bytes]]:
        return self.range(None, None)

    def reverse_all(self) -> Iterator[tuple[bytes, bytes]]:
        return self.reverse_range(None, None)
