"""Where snapshots live: a URL on shared storage, reached through fsspec.

``file:///mnt/shared/snapshots`` works out of the box; ``s3://``, ``gs://``, ``hdfs://``,
``abfs://`` work once the fsspec implementation is installed (s3fs, gcsfs, ...), with
``storage_options`` handed to it (credentials, endpoint). Nothing here knows RocksDB or
Kafka: it lists, uploads, downloads and deletes snapshot directories.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import posixpath
from collections.abc import Mapping
from typing import Any

from airflow_stateful_provider.streams.errors import ForeignStateError, InvalidSnapshotError, SnapshotError
from airflow_stateful_provider.streams.snapshots.file_checksums import file_checksum
from airflow_stateful_provider.streams.snapshots.manifest import (
    FILE_CHECKSUM,
    MANIFEST_FILE_NAME,
    SnapshotFile,
    SnapshotManifest,
    snapshot_taken_at,
)

__all__ = ["SnapshotInfo", "SnapshotStorage"]

#: Files of one snapshot downloaded and verified at the same time.
DOWNLOAD_THREADS = 4


@dataclasses.dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot directory as listed (the manifest is read only on demand)."""

    application_id: str
    task_id: str
    snapshot_id: str
    taken_at: int
    complete: bool  # has a manifest (not necessarily a valid one)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class SnapshotStorage:
    """Snapshots of one location (``url``), per application and task."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        import fsspec.core  # runtime dependency; imported here so the engine loads without touching it

        if not isinstance(url, str) or not url:
            raise SnapshotError(f"snapshot_url must be a URL such as 'file:///mnt/snapshots', got {url!r}")
        self.url = url.rstrip("/")
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url, **dict(storage_options or {}))
        except (ImportError, ValueError) as exc:
            raise SnapshotError(f"cannot use snapshot_url {url!r}: {exc} (install the fsspec implementation "
                                f"for its scheme, e.g. s3fs for s3://)") from exc
        self.root = root.rstrip("/") or "/"

    def __repr__(self) -> str:
        return f"SnapshotStorage({self.url!r})"  # never the storage options: they may hold secrets

    # ------------------------------------------------------------------ paths

    def task_path(self, application_id: str, task_id: str) -> str:
        return posixpath.join(self.root, application_id, str(task_id))

    def snapshot_path(self, application_id: str, task_id: str, snapshot_id: str) -> str:
        return posixpath.join(self.task_path(application_id, task_id), snapshot_id)

    def describe(self, application_id: str, task_id: str, snapshot_id: str) -> str:
        """How messages name a snapshot: its URL."""
        return f"{self.url}/{application_id}/{task_id}/{snapshot_id}"

    # ------------------------------------------------------------------ listing

    def exists(self) -> bool:
        """Whether the location itself exists (a typo in the URL, or a share not mounted, if not)."""
        self.fs.invalidate_cache()
        return bool(self.fs.exists(self.root))

    def list_applications(self) -> list[str]:
        """The applications with a directory at this location."""
        return sorted(posixpath.basename(entry["name"].rstrip("/")) for entry in self.fs.ls(self.root, detail=True)
                      if entry.get("type") == "directory")

    def list_tasks(self, application_id: str) -> list[str]:
        base = posixpath.join(self.root, application_id)
        if not self.fs.exists(base):
            return []
        return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(base, detail=False))

    def list_snapshots(self, application_id: str, task_id: str) -> list[SnapshotInfo]:
        """The task's snapshots, newest first; directories that are not snapshots are ignored."""
        base = self.task_path(application_id, task_id)
        self.fs.invalidate_cache()  # object stores cache listings: other instances upload and delete
        try:
            entries = self.fs.ls(base, detail=False)
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            snapshot_id = posixpath.basename(entry.rstrip("/"))
            taken_at = snapshot_taken_at(snapshot_id)
            if taken_at is None:
                continue
            complete = self.fs.exists(posixpath.join(base, snapshot_id, MANIFEST_FILE_NAME))
            found.append(SnapshotInfo(application_id, str(task_id), snapshot_id, taken_at, complete))
        return sorted(found, key=lambda s: s.snapshot_id, reverse=True)

    def read_manifest(self, info: SnapshotInfo) -> SnapshotManifest:
        """The snapshot's manifest, checked against the directory it lies in: a snapshot of
        another application or task is refused with ForeignStateError, as a task directory
        holding another application's state is (processing/task_directories.py)."""
        name = self.describe(info.application_id, info.task_id, info.snapshot_id)
        path = posixpath.join(self.snapshot_path(info.application_id, info.task_id, info.snapshot_id),
                              MANIFEST_FILE_NAME)
        try:
            text = self.fs.cat_file(path)
        except FileNotFoundError:
            raise InvalidSnapshotError(f"snapshot {name} has no {MANIFEST_FILE_NAME} (partial upload)") from None
        manifest = SnapshotManifest.from_json(text, f"snapshot {name}")
        if (manifest.application_id, manifest.task_id) != (info.application_id, info.task_id):
            raise ForeignStateError(
                f"snapshot {name} holds state of application {manifest.application_id!r}, task {manifest.task_id}, "
                f"not of application {info.application_id!r}, task {info.task_id}: it is never loaded; move it out "
                f"of {self.url}/{info.application_id}/{info.task_id}/ (or delete it) and start again")
        if manifest.snapshot_id != info.snapshot_id:
            raise InvalidSnapshotError(
                f"snapshot {name}: manifest is of {manifest.application_id}/{manifest.task_id}/"
                f"{manifest.snapshot_id}, not of the directory it is in")
        return manifest

    # ------------------------------------------------------------------ transfer

    def upload(self, local_dir: str, application_id: str, task_id: str, snapshot_id: str,
               relative_paths: list[str]) -> list[SnapshotFile]:
        """Upload files of ``local_dir`` (checksummed while read); the manifest comes separately."""
        target = self.snapshot_path(application_id, task_id, snapshot_id)
        uploaded = []
        for relative in relative_paths:
            local = os.path.join(local_dir, *relative.split("/"))
            entry = SnapshotFile(relative, *file_checksum(local, FILE_CHECKSUM))
            remote = posixpath.join(target, relative)
            self.fs.makedirs(posixpath.dirname(remote), exist_ok=True)
            self.fs.put_file(local, remote)
            uploaded.append(entry)
        return uploaded

    def write_manifest(self, manifest: SnapshotManifest) -> None:
        path = posixpath.join(self.snapshot_path(manifest.application_id, manifest.task_id, manifest.snapshot_id),
                              MANIFEST_FILE_NAME)
        self.fs.pipe_file(path, manifest.to_json().encode("utf-8"))

    def download(self, manifest: SnapshotManifest, local_dir: str) -> None:
        """Download every file the manifest lists into ``local_dir`` and check its size and
        checksum; :class:`InvalidSnapshotError` naming the first file (in the manifest's
        order) that is missing or differs. Up to DOWNLOAD_THREADS files at a time: copying
        and checksumming release the interpreter lock, so a large snapshot loads on every core
        (and, from an object store, over several connections)."""
        for entry in manifest.files:
            os.makedirs(os.path.dirname(os.path.join(local_dir, *entry.path.split("/"))), exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(DOWNLOAD_THREADS, thread_name_prefix="snapshot-download") as pool:
            downloads = [pool.submit(self._download_file, manifest, entry, local_dir) for entry in manifest.files]
            try:
                for download in downloads:
                    download.result()
            except BaseException:
                pool.shutdown(cancel_futures=True)  # the rest is not needed: the snapshot is skipped
                raise

    def _download_file(self, manifest: SnapshotManifest, entry: SnapshotFile, local_dir: str) -> None:
        name = self.describe(manifest.application_id, manifest.task_id, manifest.snapshot_id)
        source = self.snapshot_path(manifest.application_id, manifest.task_id, manifest.snapshot_id)
        local = os.path.join(local_dir, *entry.path.split("/"))
        try:
            self.fs.get_file(posixpath.join(source, entry.path), local)
        except FileNotFoundError:
            raise InvalidSnapshotError(f"snapshot {name}: file {entry.path} is missing") from None
        size, checksum = file_checksum(local, entry.algorithm)
        if size != entry.size:
            raise InvalidSnapshotError(
                f"snapshot {name}: file {entry.path} has {size} bytes, the manifest says {entry.size}")
        if checksum != entry.checksum:
            raise InvalidSnapshotError(f"snapshot {name}: file {entry.path} has {entry.algorithm} {checksum}, "
                                       f"the manifest says {entry.checksum}")

    def delete(self, info: SnapshotInfo) -> None:
        """Delete a snapshot: the manifest first, so a half-deleted snapshot is partial, never
        a complete-looking one with files missing."""
        path = self.snapshot_path(info.application_id, info.task_id, info.snapshot_id)
        manifest = posixpath.join(path, MANIFEST_FILE_NAME)
        try:
            self.fs.rm_file(manifest)
        except FileNotFoundError:
            pass
        try:
            self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass
