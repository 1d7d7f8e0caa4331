"""Versioned key-value stores (KIP-889): per key a timeline of versions, RocksDB and in-memory.

Semantics (docs/semantics.md §5): a version is ``(valid_from, value or tombstone)``; it is
valid until the next version's ``valid_from``. ``put`` returns that ``valid_to``,
``-1`` (:data:`VALID_TO_UNDEFINED`) when the version is the newest, or
:data:`NOT_PUT` when it is older than ``observed stream time - history retention``.
``get(key, as_of)`` beyond history retention answers only from the newest version.

This module holds the protocol and what both implementations share; the implementations
are rocksdb.py (segments on RocksDB) and in_memory.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import ConfigError, InvalidRecordError
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.cutoff import VERSIONED_CUTOFF_KEY
from airflow_stateful_provider.streams.state.common.metadata import MetadataKind
from airflow_stateful_provider.streams.state.common.segments import SegmentedStore

__all__ = [
    "MAX_TIMESTAMP",
    "METADATA",
    "NOT_PUT",
    "VALID_TO_UNDEFINED",
    "VersionedKeyValueStore",
    "VersionedRecord",
    "VersionedStoreBase",
    "check_key",
    "check_time",
    "history_retention_ms",
    "segment_interval_ms",
    "versioned_segment_interval",
]

#: ``put`` return: the version was older than history retention and was not stored.
NOT_PUT = -(1 << 63)
#: ``put`` return: the version is the newest one, so its validity has no end yet.
VALID_TO_UNDEFINED = -1
MAX_TIMESTAMP = (1 << 63) - 1
#: What the metadata of a versioned store directory holds: the history retention and
#: segment interval it was created with.
METADATA = MetadataKind("versioned", required={"history_retention_ms": 0, "segment_interval_ms": 1})


V = TypeVar("V")


class VersionedRecord(NamedTuple, Generic[V]):
    """One version of a key's value: ``value``, valid from ``timestamp`` until ``valid_to``
    (exclusive; None for the newest version). The byte stores return it with the value's
    bytes, the typed view with the deserialized value. A NamedTuple because reads create
    one per version returned: it is the cheapest object with named fields."""

    value: V
    timestamp: int
    valid_to: int | None = None


@runtime_checkable
class VersionedKeyValueStore(Protocol):
    """Kafka Streams' ``VersionedKeyValueStore<Bytes, byte[]>`` in snake_case."""

    @property
    def name(self) -> str: ...

    history_retention_ms: int

    @property
    def persistent(self) -> bool: ...

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int: ...

    def delete(self, key: bytes, timestamp: int) -> VersionedRecord[bytes] | None: ...

    def get(self, key: bytes, as_of: int | None = None) -> VersionedRecord[bytes] | None: ...

    def get_versions(
        self, key: bytes, from_time: int | None = None, to_time: int | None = None, ascending: bool = False
    ) -> list[VersionedRecord[bytes]]: ...

    def restore_batch(self, records: Iterable[ChangelogRecord]) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def versioned_segment_interval(history_retention_ms: int) -> int:
    """Kafka's default versioned store segment interval by history retention (docs/semantics.md §5)."""
    hr = history_retention_ms
    if hr <= 60_000:
        return max(hr // 3, 2_000)
    if hr <= 300_000:
        return max(hr // 5, 20_000)
    if hr <= 3_600_000:
        return max(hr // 12, 60_000)
    return max(hr // 24, 300_000)


def history_retention_ms(value: int | Any) -> int:
    return duration_ms(value, "history retention", minimum=0)


def segment_interval_ms(value: int | Any | None, history_retention_ms: int) -> int:
    if value is None:
        return versioned_segment_interval(history_retention_ms)
    ms = duration_ms(value, "segment interval")
    if ms < 1:
        raise ConfigError(f"versioned store segment interval must be > 0 ms, got {ms} ms")
    return ms


def _bad_put(key: object, value: object, timestamp: object) -> InvalidRecordError:
    if key is None:
        return InvalidRecordError("versioned store key cannot be null (None)")
    if type(key) is not bytes:
        return InvalidRecordError(f"versioned store keys must be bytes, got {type(key).__name__} {key!r:.80}")
    if value is not None and type(value) is not bytes:
        return InvalidRecordError(
            f"versioned store values must be bytes or None, got {type(value).__name__} {value!r:.80}"
        )
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        return InvalidRecordError(f"timestamp must be an int (ms), got {type(timestamp).__name__} {timestamp!r}")
    return InvalidRecordError(f"timestamp must be >= 0 and fit in 64 bits, got {timestamp}")


def check_key(key: object) -> None:
    if type(key) is not bytes:
        raise _bad_put(key, None, 0)


def check_time(value: object, what: str) -> None:
    if value is not None and type(value) is not int:
        raise InvalidRecordError(f"{what} must be int ms or None, got {type(value).__name__} {value!r}")


class VersionedStoreBase(SegmentedStore):
    """What both implementations do the same way around their own ``_do_put``: the
    history retention check on writes, argument checks, and changelog replay
    (observed stream time is the largest accepted put timestamp)."""

    history_retention_ms: int
    read_only: bool
    cutoff_marker_key = VERSIONED_CUTOFF_KEY
    _open: bool
    _check_open: Callable[[], None]
    _do_put: Callable[[bytes, bytes | None, int], int]
    get: Callable[[bytes, int | None], VersionedRecord[bytes] | None]

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        """Insert or replace the version of ``key`` at ``timestamp`` (None = tombstone).

        Returns the version's valid_to, :data:`VALID_TO_UNDEFINED` (-1) when it is the
        newest, or :data:`NOT_PUT` when it is older than history retention.
        """
        if (
            type(key) is not bytes
            or (value is not None and type(value) is not bytes)
            or type(timestamp) is not int
            or timestamp < 0
            or timestamp > MAX_TIMESTAMP
        ):
            raise _bad_put(key, value, timestamp)
        if self.read_only or not self._open:
            self._check_writable()
        observed = self._observed
        if timestamp < observed - self.history_retention_ms:
            self.dropped_writes += 1
            return NOT_PUT
        if timestamp > observed:
            self._advance(timestamp)
        return self._do_put(key, value, timestamp)

    def delete(self, key: bytes, timestamp: int) -> VersionedRecord[bytes] | None:
        """Put a tombstone at ``timestamp``; returns the version that was valid there before
        (None when none, or when ``timestamp`` is beyond history retention)."""
        if type(key) is not bytes or type(timestamp) is not int or timestamp < 0 or timestamp > MAX_TIMESTAMP:
            raise _bad_put(key, None, timestamp)
        self._check_writable()
        if timestamp < self._observed - self.history_retention_ms:
            self.dropped_writes += 1
            return None
        existing = self.get(key, timestamp)
        if timestamp > self._observed:
            self._advance(timestamp)
        self._do_put(key, None, timestamp)
        return existing

    def _version_range(self, key: bytes, from_time: int | None, to_time: int | None) -> tuple[int, int]:
        """get_versions' arguments checked (and the store open); None bounds open up."""
        check_key(key)
        check_time(from_time, "from_time")
        check_time(to_time, "to_time")
        self._check_open()
        return 0 if from_time is None else from_time, MAX_TIMESTAMP if to_time is None else to_time

    def _replay(self, records: Iterable[ChangelogRecord]) -> int:
        """restore_batch's loop: records (key, value or None, timestamp = valid_from) applied
        as puts. Returns how many were applied (records beyond history retention at their
        turn are skipped, as the original put skipped them)."""
        applied = 0
        for record in records:
            key = record.key
            if key is None:
                continue
            ts = record.timestamp
            value = record.value
            if (
                type(key) is not bytes
                or (value is not None and type(value) is not bytes)
                or type(ts) is not int
                or ts < 0
                or ts > MAX_TIMESTAMP
            ):
                raise InvalidRecordError(
                    f"versioned changelog record at offset {record.offset} is invalid: "
                    f"key={key!r:.60} value type={type(value).__name__} timestamp={ts!r}"
                )
            if ts < self._observed - self.history_retention_ms:
                continue
            if ts > self._observed:
                self._advance(ts)
            self._do_put(key, value, ts)
            applied += 1
        return applied
