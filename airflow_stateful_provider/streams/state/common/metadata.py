"""The metadata file that makes a store directory self-describing.

Every persistent store directory holds ``store-metadata.json`` next to its
``rocksdb/`` folder. It says what the bytes mean (store type, on-disk format
version, retention, segment interval, serde names) so maintenance operators and
the CLI can open the store with :func:`~.store_dir.open_store` without the
topology code. It is written once, atomically, when the store is created.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from typing import Any

from airflow_stateful_provider.streams.errors import InvalidStoreError

__all__ = [
    "DB_DIR_NAME",
    "FORMAT_VERSION",
    "METADATA_FILE_NAME",
    "StoreMetadata",
    "StoreType",
    "read_metadata",
    "write_metadata",
]

METADATA_FILE_NAME = "store-metadata.json"
DB_DIR_NAME = "rocksdb"
#: On-disk format version written by this code; readers refuse any other.
FORMAT_VERSION = 1


class StoreType(str, enum.Enum):
    """Kind of store a directory holds (the ``store_type`` field)."""

    KEY_VALUE = "keyvalue"
    SESSION = "session"
    VERSIONED = "versioned"


# Fields required (besides the common ones) per store type, with the lower bound of each.
_REQUIRED: dict[StoreType, dict[str, int]] = {
    StoreType.KEY_VALUE: {},
    StoreType.SESSION: {"retention_ms": 1, "segment_interval_ms": 1},
    StoreType.VERSIONED: {"history_retention_ms": 0, "segment_interval_ms": 1},
}
_OPTIONAL_INTS = ("inactivity_gap_ms", "grace_period_ms")


@dataclasses.dataclass(frozen=True)
class StoreMetadata:
    """Contents of ``store-metadata.json``. ``None`` fields do not apply to the store type."""

    store_type: StoreType
    name: str
    key_serde: str = "bytes"
    value_serde: str = "bytes"
    retention_ms: int | None = None
    history_retention_ms: int | None = None
    segment_interval_ms: int | None = None
    inactivity_gap_ms: int | None = None
    grace_period_ms: int | None = None
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        doc: dict[str, Any] = {"format_version": self.format_version, "store_type": self.store_type.value}
        for field in dataclasses.fields(self):
            if field.name in ("format_version", "store_type"):
                continue
            value = getattr(self, field.name)
            if value is not None:
                doc[field.name] = value
        return json.dumps(doc, indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "<metadata>") -> StoreMetadata:
        """Parse and validate; every problem is an :class:`InvalidStoreError` naming ``source``."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InvalidStoreError(f"{source}: store metadata is not valid JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise InvalidStoreError(f"{source}: store metadata must be a JSON object, got {type(doc).__name__}")
        version = doc.get("format_version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidStoreError(f"{source}: store metadata has no integer format_version (got {version!r})")
        if version != FORMAT_VERSION:
            raise InvalidStoreError(
                f"{source}: unknown store format version {version}; this code reads version {FORMAT_VERSION}"
            )
        raw_type = doc.get("store_type")
        try:
            store_type = StoreType(raw_type)
        except ValueError:
            raise InvalidStoreError(
                f"{source}: unknown store_type {raw_type!r}; expected one of {[t.value for t in StoreType]}"
            ) from None
        name = doc.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidStoreError(f"{source}: store metadata needs a non-empty string 'name', got {name!r}")
        values: dict[str, Any] = {}
        for serde_field in ("key_serde", "value_serde"):
            serde = doc.get(serde_field, "bytes")
            if not isinstance(serde, str) or not serde:
                raise InvalidStoreError(f"{source}: {serde_field} must be a non-empty string, got {serde!r}")
            values[serde_field] = serde
        for field, minimum in _REQUIRED[store_type].items():
            values[field] = _int_field(doc, field, minimum, source, required=True)
        for field in _OPTIONAL_INTS:
            if field in doc:
                values[field] = _int_field(doc, field, 0, source, required=False)
        return cls(store_type=store_type, name=name, format_version=version, **values)

    def check_compatible(self, requested: StoreMetadata, source: str) -> None:
        """Raise if ``requested`` (what the caller asked for) disagrees with what is on disk.

        Why strict: a different segment interval or retention would silently misplace or
        lose data, and a different serde would make every value unreadable. Changing any of
        them means wiping the store and restoring it from its changelog.
        """
        if requested.store_type is not self.store_type:
            raise InvalidStoreError(
                f"{source} holds a {self.store_type.value!r} store, not a {requested.store_type.value!r} store"
            )
        for field in (
            "key_serde",
            "value_serde",
            "retention_ms",
            "history_retention_ms",
            "segment_interval_ms",
        ):
            mine, theirs = getattr(self, field), getattr(requested, field)
            if theirs is not None and mine != theirs:
                raise InvalidStoreError(
                    f"{source}: store was created with {field}={mine!r} but opened with {field}={theirs!r}; "
                    f"wipe the store directory and restore it from the changelog to change it"
                )


def _int_field(doc: dict[str, Any], field: str, minimum: int, source: str, *, required: bool) -> int | None:
    value = doc.get(field)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidStoreError(f"{source}: {field} must be an integer, got {value!r}")
    if value < minimum:
        raise InvalidStoreError(f"{source}: {field} must be >= {minimum}, got {value}")
    return value


def read_metadata(store_dir: str | os.PathLike[str]) -> StoreMetadata:
    """Metadata of the store at ``store_dir``; a precise error when absent or invalid."""
    store_dir = os.fspath(store_dir)
    path = os.path.join(store_dir, METADATA_FILE_NAME)
    if not os.path.exists(store_dir):
        raise InvalidStoreError(f"store directory {store_dir} does not exist")
    if not os.path.isdir(store_dir):
        raise InvalidStoreError(f"{store_dir} is not a directory")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise InvalidStoreError(
            f"{store_dir} is not a store directory: it has no {METADATA_FILE_NAME}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidStoreError(f"cannot read store metadata {path}: {exc}") from exc
    return StoreMetadata.from_json(text, path)


def write_metadata(store_dir: str | os.PathLike[str], metadata: StoreMetadata) -> None:
    """Write ``metadata`` into ``store_dir`` atomically (temp file, fsync, rename)."""
    store_dir = os.fspath(store_dir)
    path = os.path.join(store_dir, METADATA_FILE_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(metadata.to_json())
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
