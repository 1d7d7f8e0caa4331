"""The manifest of a store snapshot: what it holds and how to check it (docs/snapshots.md).

A snapshot of one task is a directory on shared storage::

    <snapshot_url>/<application_id>/<task_id>/<snapshot_id>/<store>/store-metadata.json
                                                            <store>/rocksdb/...
                                                            manifest.json      (written last)

The manifest names every file with its size and checksum (file_checksums.py), and every store with the
changelog partition and the offset of the last changelog record its state includes.
It is written after every file is uploaded, so a snapshot without one is partial.
Parsing is strict: any doubt makes the snapshot invalid, and invalid snapshots are never
loaded.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from airflow_stateful_provider.streams.errors import InvalidSnapshotError
from airflow_stateful_provider.streams.snapshots.file_checksums import CHECKSUM_OF_FORMAT, checksum_is_well_formed

__all__ = [
    "FILE_CHECKSUM",
    "MANIFEST_FILE_NAME",
    "MANIFEST_FORMAT_VERSION",
    "SnapshotFile",
    "SnapshotManifest",
    "StoreSnapshot",
    "new_snapshot_id",
    "snapshot_taken_at",
]

MANIFEST_FILE_NAME = "manifest.json"
#: Written by this version; format 1 (SHA-256 checksums) is still read.
MANIFEST_FORMAT_VERSION = 2
#: The checksum of the files of the snapshots this version takes.
FILE_CHECKSUM = CHECKSUM_OF_FORMAT[MANIFEST_FORMAT_VERSION]

#: ``<taken_at ms, 13 digits>-<8 hex>``: names sort by time.
_SNAPSHOT_ID = re.compile(r"^(\d{13})-([0-9a-f]{8})$")


def new_snapshot_id(taken_at_ms: int, unique: str) -> str:
    """The id of a snapshot taken at ``taken_at_ms``; ``unique`` is 8 hex digits."""
    snapshot_id = f"{taken_at_ms:013d}-{unique}"
    if not _SNAPSHOT_ID.match(snapshot_id):
        raise ValueError(f"not a snapshot id: {snapshot_id!r}")
    return snapshot_id


def snapshot_taken_at(snapshot_id: str) -> int | None:
    """When the snapshot named ``snapshot_id`` was taken (epoch ms), None for other names."""
    match = _SNAPSHOT_ID.match(snapshot_id)
    return int(match.group(1)) if match else None


@dataclasses.dataclass(frozen=True)
class SnapshotFile:
    """One file of the snapshot, relative to the snapshot directory (``/``-separated), with
    its ``checksum`` (hex digest of ``algorithm``)."""

    path: str
    size: int
    checksum: str
    algorithm: str = FILE_CHECKSUM

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, self.algorithm: self.checksum}


@dataclasses.dataclass(frozen=True)
class StoreSnapshot:
    """One store: its changelog partition and the offset of the last changelog record its
    state includes (None: no changelog record was ever applied; restore from the log start)."""

    name: str
    changelog_topic: str
    changelog_partition: int
    offset: int | None
    store_type: str
    approximate_entries: int


@dataclasses.dataclass(frozen=True)
class SnapshotManifest:
    """Contents of ``manifest.json``."""

    application_id: str
    task_id: str
    snapshot_id: str
    taken_at: int
    processing_guarantee: str
    stores: tuple[StoreSnapshot, ...]
    files: tuple[SnapshotFile, ...]
    format_version: int = MANIFEST_FORMAT_VERSION

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def store(self, name: str) -> StoreSnapshot | None:
        return next((s for s in self.stores if s.name == name), None)

    def to_json(self) -> str:
        doc = {
            "format_version": self.format_version,
            "application_id": self.application_id,
            "task_id": self.task_id,
            "snapshot_id": self.snapshot_id,
            "taken_at": self.taken_at,
            "processing_guarantee": self.processing_guarantee,
            "stores": [dataclasses.asdict(s) for s in self.stores],
            "files": [f.as_dict() for f in self.files],
        }
        return json.dumps(doc, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, source: str) -> SnapshotManifest:
        """Parse and check; every problem is an :class:`InvalidSnapshotError` naming ``source``."""
        try:
            doc = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidSnapshotError(f"{source}: manifest is not valid JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise InvalidSnapshotError(f"{source}: manifest must be a JSON object")
        fields = _Fields(doc, source)
        version = fields.integer("format_version", 1)
        if version not in CHECKSUM_OF_FORMAT:
            raise InvalidSnapshotError(
                f"{source}: manifest format_version {version} is not one of {sorted(CHECKSUM_OF_FORMAT)}; "
                f"upgrade the reading side")
        snapshot_id = fields.text("snapshot_id")
        if not _SNAPSHOT_ID.match(snapshot_id):
            raise InvalidSnapshotError(f"{source}: snapshot_id {snapshot_id!r} is not <13 digits>-<8 hex>")
        stores = tuple(_store(entry, f"{source}: stores[{i}]") for i, entry in enumerate(fields.listing("stores")))
        algorithm = CHECKSUM_OF_FORMAT[version]
        files = tuple(_file(entry, f"{source}: files[{i}]", algorithm)
                      for i, entry in enumerate(fields.listing("files")))
        paths = [f.path for f in files]
        if len(set(paths)) != len(paths):
            raise InvalidSnapshotError(f"{source}: a file is listed twice")
        names = [s.name for s in stores]
        if len(set(names)) != len(names):
            raise InvalidSnapshotError(f"{source}: a store is listed twice")
        return cls(application_id=fields.text("application_id"), task_id=fields.text("task_id"),
                   snapshot_id=snapshot_id, taken_at=fields.integer("taken_at", 0),
                   processing_guarantee=fields.text("processing_guarantee"), stores=stores, files=files,
                   format_version=version)


class _Fields:
    """Typed access to a JSON object's fields, with errors naming the field."""

    def __init__(self, doc: dict[str, Any], source: str) -> None:
        self._doc, self._source = doc, source

    def _get(self, name: str) -> Any:
        if name not in self._doc:
            raise InvalidSnapshotError(f"{self._source}: field {name!r} is missing")
        return self._doc[name]

    def text(self, name: str) -> str:
        value = self._get(name)
        if not isinstance(value, str) or not value:
            raise InvalidSnapshotError(f"{self._source}: field {name!r} must be a non-empty string, got {value!r}")
        return value

    def integer(self, name: str, minimum: int, *, nullable: bool = False) -> Any:
        value = self._get(name)
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InvalidSnapshotError(f"{self._source}: field {name!r} must be an int >= {minimum}, got {value!r}")
        return value

    def listing(self, name: str) -> list[Any]:
        value = self._get(name)
        if not isinstance(value, list):
            raise InvalidSnapshotError(f"{self._source}: field {name!r} must be a list, got {value!r}")
        return value


def _store(entry: Any, source: str) -> StoreSnapshot:
    if not isinstance(entry, dict):
        raise InvalidSnapshotError(f"{source} must be an object")
    fields = _Fields(entry, source)
    return StoreSnapshot(name=fields.text("name"), changelog_topic=fields.text("changelog_topic"),
                         changelog_partition=fields.integer("changelog_partition", 0),
                         offset=fields.integer("offset", 0, nullable=True), store_type=fields.text("store_type"),
                         approximate_entries=fields.integer("approximate_entries", 0))


def _file(entry: Any, source: str, algorithm: str) -> SnapshotFile:
    if not isinstance(entry, dict):
        raise InvalidSnapshotError(f"{source} must be an object")
    fields = _Fields(entry, source)
    path = fields.text("path")
    parts = path.split("/")
    if path.startswith("/") or any(part in ("", ".", "..") for part in parts) or "\\" in path:
        raise InvalidSnapshotError(f"{source}: path {path!r} must be relative, without '.' or '..' parts")
    checksum = fields.text(algorithm)
    if not checksum_is_well_formed(algorithm, checksum):
        raise InvalidSnapshotError(f"{source}: {algorithm} {checksum!r} is not a lowercase hex digest")
    return SnapshotFile(path=path, size=fields.integer("size", 0), checksum=checksum, algorithm=algorithm)
