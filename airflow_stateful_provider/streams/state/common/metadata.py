"""The metadata file that makes a store directory self-describing.

Every persistent store directory holds ``store-metadata.json`` next to its
``rocksdb/`` folder. It says what the bytes mean (store type, on-disk format
version, serde names, and the settings of the store's kind: retention, segment
interval, ...) so maintenance operators and the CLI can open the store with
``state/store_dir.py``'s ``open_store`` without the topology code. It is written once,
atomically, when the store is created. Which store types exist, and which settings
each has, the store kinds register (:class:`MetadataKind`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from airflow_stateful_provider.streams.errors import ConfigError, InvalidStoreError

__all__ = [
    "DB_DIR_NAME",
    "FORMAT_VERSION",
    "METADATA_FILE_NAME",
    "MetadataKind",
    "StoreMetadata",
    "metadata_kind",
    "read_metadata",
    "register_metadata_kind",
    "write_metadata",
]

METADATA_FILE_NAME = "store-metadata.json"
DB_DIR_NAME = "rocksdb"
#: On-disk format version written by this code; readers refuse any other.
FORMAT_VERSION = 1
#: The fields of every store's metadata; the settings of a kind are the others.
_COMMON_FIELDS = frozenset({"format_version", "store_type", "name", "key_serde", "value_serde"})


@dataclasses.dataclass(frozen=True)
class MetadataKind:
    """What the metadata of one kind of store holds besides the common fields: its
    ``store_type`` and its integer settings, each with its lower bound.

    ``required`` settings are in every store of the kind, and a store is opened only with
    the values it was created with; ``optional`` ones are informational. Each kind folder
    declares its own (``<kind>/store.py``); registering its store kind registers it.
    """

    store_type: str
    required: Mapping[str, int] = dataclasses.field(default_factory=dict)
    optional: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.store_type or not self.store_type.isidentifier():
            raise ConfigError(f"store_type must be a non-empty identifier, got {self.store_type!r}")
        if set(self.required) & set(self.optional) or (set(self.required) | set(self.optional)) & _COMMON_FIELDS:
            raise ConfigError(f"store type {self.store_type!r}: settings must be distinct from each other and "
                             f"from the common fields {sorted(_COMMON_FIELDS)}")


#: store_type -> its metadata kind, in registration order.
_KINDS: dict[str, MetadataKind] = {}


def register_metadata_kind(kind: MetadataKind) -> None:
    """Let metadata files of ``kind.store_type`` be read (the store kind registry calls this)."""
    registered = _KINDS.get(kind.store_type)
    if registered is not None and registered != kind:
        raise ConfigError(f"store_type {kind.store_type!r} is registered already, with other settings: {registered}")
    _KINDS[kind.store_type] = kind


def metadata_kind(store_type: object, source: str) -> MetadataKind:
    """The registered kind of ``store_type``; an :class:`InvalidStoreError` naming ``source`` if none."""
    kind = _KINDS.get(store_type) if isinstance(store_type, str) else None
    if kind is None:
        raise InvalidStoreError(
            f"{source}: unknown store_type {store_type!r}; expected one of {list(_KINDS)}"
        )
    return kind


@dataclasses.dataclass(frozen=True)
class StoreMetadata:
    """Contents of ``store-metadata.json``: the common fields and the integer ``settings`` of
    the store's kind (retention and such; see :class:`MetadataKind`). A store opening an
    existing directory may leave settings out: it then takes the stored ones."""

    store_type: str
    name: str
    key_serde: str = "bytes"
    value_serde: str = "bytes"
    settings: Mapping[str, int] = dataclasses.field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        doc: dict[str, Any] = {"format_version": self.format_version, "store_type": self.store_type,
                               "name": self.name, "key_serde": self.key_serde, "value_serde": self.value_serde}
        doc.update(self.settings)
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
        kind = metadata_kind(doc.get("store_type"), source)
        name = doc.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidStoreError(f"{source}: store metadata needs a non-empty string 'name', got {name!r}")
        serdes: dict[str, str] = {}
        for serde_field in ("key_serde", "value_serde"):
            serde = doc.get(serde_field, "bytes")
            if not isinstance(serde, str) or not serde:
                raise InvalidStoreError(f"{source}: {serde_field} must be a non-empty string, got {serde!r}")
            serdes[serde_field] = serde
        settings: dict[str, int] = {}
        for field, minimum in kind.required.items():
            settings[field] = _int_field(doc, field, minimum, source)
        for field, minimum in kind.optional.items():
            if doc.get(field) is not None:
                settings[field] = _int_field(doc, field, minimum, source)
        return cls(store_type=kind.store_type, name=name, settings=settings, format_version=version, **serdes)

    def setting(self, name: str) -> int | None:
        """The value of one of the kind's settings; None when this metadata does not give it."""
        return self.settings.get(name)

    def check_compatible(self, requested: StoreMetadata, source: str) -> None:
        """Raise if ``requested`` (what the caller asked for) disagrees with what is on disk.

        Why strict: a different segment interval or retention would silently misplace or
        lose data, and a different serde would make every value unreadable. Changing any of
        them means wiping the store and restoring it from its changelog.
        """
        if requested.store_type != self.store_type:
            raise InvalidStoreError(
                f"{source} holds a {self.store_type!r} store, not a {requested.store_type!r} store"
            )
        compared = [(field, getattr(self, field), getattr(requested, field)) for field in ("key_serde", "value_serde")]
        compared += [(field, self.settings.get(field), requested.settings.get(field))
                     for field in metadata_kind(self.store_type, source).required]
        for field, mine, theirs in compared:
            if theirs is not None and mine != theirs:
                raise InvalidStoreError(
                    f"{source}: store was created with {field}={mine!r} but opened with {field}={theirs!r}; "
                    f"wipe the store directory and restore it from the changelog to change it"
                )


def _int_field(doc: dict[str, Any], field: str, minimum: int, source: str) -> int:
    value = doc.get(field)
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
