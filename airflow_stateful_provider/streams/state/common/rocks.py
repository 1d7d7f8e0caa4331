"""What every RocksDB-backed store shares: its directory, the RocksDB handle, flush,
close, compaction and disk usage.

Directory layout (one per store, inside the task directory)::

    <store>/store-metadata.json   what the store is (see metadata.py)
    <store>/rocksdb/              the RocksDB instance (raw bytes keys and values)

A new store directory is built under a temporary sibling name and renamed into
place, so a crash never leaves a half-created store behind: the directory either
is complete or does not exist.

Writes skip RocksDB's write-ahead log. The changelog topic is the durability
source (as in Kafka Streams): the runtime flushes stores before it writes the
checkpoint, and anything after the last flush is restored from the changelog.
A consequence for readers in other processes (``read_only=True``, RocksDB
secondary mode): they see the store as of its last flush.

Transactional stores (``transactional=True``, for exactly-once processing) write into
a :class:`TransactionBuffer` instead; :meth:`RocksDBStore.commit_transaction` moves it
into RocksDB in one batch with the write-ahead log on, so RocksDB holds exactly the
committed transactions even after a crash (see transaction_buffer.py). Their direct
writes (restoration) use the write-ahead log too: otherwise a crash could lose restored
rows while keeping the commits made on top of them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import wraps
from typing import Any, ClassVar, TypeVar

import rocksdict

from airflow_stateful_provider.streams.errors import ConfigError, InvalidStoreError, ReadOnlyStoreError
from airflow_stateful_provider.streams.state.common.maintenance import CompactionResult, StoreStats
from airflow_stateful_provider.streams.state.common.metadata import (
    DB_DIR_NAME,
    METADATA_FILE_NAME,
    StoreMetadata,
    read_metadata,
    write_metadata,
)
from airflow_stateful_provider.streams.state.common.rocksdb_memory import RocksDBMemory, process_default_memory
from airflow_stateful_provider.streams.state.common.transaction_buffer import TransactionBuffer

__all__ = ["RocksDBStore", "bytes_on_disk", "prepare_store_dir", "restores_directly"]

def _rdict(db_path: str, options: rocksdict.Options,
          access_type: rocksdict.AccessType | None = None) -> rocksdict.Rdict:
    """Open with ``options`` (rocksdb_memory.py). The default column family's options are passed
    explicitly: given only ``options``, rocksdict takes the column family options from the DB's
    OPTIONS file, which drops the bloom filter and the shared block cache on reopen."""
    if access_type is None:
        return rocksdict.Rdict(db_path, options, column_families={"default": options})
    return rocksdict.Rdict(db_path, options, column_families={"default": options}, access_type=access_type)


def _write_options(wal: bool = False) -> rocksdict.WriteOptions:
    wo = rocksdict.WriteOptions()
    wo.disable_wal = not wal  # type: ignore[method-assign, assignment]  # a setter; rocksdict's stub says method
    return wo


def bytes_on_disk(path: str) -> int:
    """Total size of the regular files under ``path`` (0 when it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # RocksDB deleted an obsolete file meanwhile
                continue
    return total


def prepare_store_dir(path: str, requested: StoreMetadata, memory: RocksDBMemory | None = None) -> StoreMetadata:
    """Make sure ``path`` is a store directory matching ``requested``; returns its metadata.

    Existing directory: its metadata must agree with ``requested`` (fields left None in
    ``requested`` take the stored value). Missing directory (or an empty one): it is
    created atomically with ``requested`` as metadata and an empty RocksDB (opened with
    ``memory``'s options, the process default when None). Anything else
    (a file, a non-empty directory without metadata) is refused without touching it.
    """
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, METADATA_FILE_NAME)):
            stored = read_metadata(path)
            stored.check_compatible(requested, path)
            if not os.path.isdir(os.path.join(path, DB_DIR_NAME)):
                raise InvalidStoreError(f"{path} has store metadata but no {DB_DIR_NAME}/ directory")
            return stored
        if os.listdir(path):
            raise InvalidStoreError(
                f"{path} is a non-empty directory without {METADATA_FILE_NAME}; "
                f"refusing to create a store in it"
            )
    elif os.path.lexists(path):
        raise InvalidStoreError(f"{path} exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".{os.path.basename(path)}.creating-{uuid.uuid4().hex[:12]}")
    os.mkdir(staging)
    try:
        write_metadata(staging, requested)
        options = (memory or process_default_memory()).options(requested.name, create=True)
        db = _rdict(os.path.join(staging, DB_DIR_NAME), options)
        db.close()
        del db
        try:
            os.rename(staging, path)  # replaces an empty directory, fails on a non-empty one
        except OSError:
            if os.path.exists(os.path.join(path, METADATA_FILE_NAME)):  # another opener won the race
                stored = read_metadata(path)
                stored.check_compatible(requested, path)
                return stored
            raise
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging, ignore_errors=True)
    return requested


_R = TypeVar("_R")


def restores_directly(method: Callable[..., _R]) -> Callable[..., _R]:
    """For ``restore_batch``: changelog records are committed data, so even a transactional
    store writes them straight to RocksDB (inside :meth:`RocksDBStore.restoring`); the first
    batch turns the memtable filter off until :meth:`RocksDBStore.end_restoration`, unless the
    store reads while it restores."""

    @wraps(method)
    def restore(self: RocksDBStore, *args: Any, **kwargs: Any) -> _R:
        if not self._memtable_filter_off and not self.reads_while_restoring:
            self._check_writable()
            self._set_memtable_filter(on=False)
        with self.restoring():
            return method(self, *args, **kwargs)

    return restore


class RocksDBStore:
    """Base of the persistent stores: opening, flush/close, compaction, disk usage.

    Subclasses set ``store_type`` and may override ``_on_flush`` to persist in-memory
    state (e.g. observed stream time) into the RocksDB just before it is flushed.

    With ``transactional=True`` ``self._db`` is a :class:`TransactionBuffer` over the
    RocksDB: writes stay in memory until :meth:`commit_transaction`, and
    :meth:`abort_transaction` or :meth:`close` drop them.

    ``rocksdb_memory``: the instance's memory budget and RocksDB options (rocksdb_memory.py);
    None: the process default.
    """

    store_type: ClassVar[str]
    persistent: ClassVar[bool] = True
    #: Whether restore_batch reads the store (a versioned store looks up the rows it replaces):
    #: such a store keeps its memtable filter while it restores.
    reads_while_restoring: ClassVar[bool] = False

    def __init__(
        self, path: str | os.PathLike[str], requested: StoreMetadata, *, read_only: bool, transactional: bool = False,
        rocksdb_memory: RocksDBMemory | None = None,
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        if transactional and read_only:
            raise ConfigError(f"store {self.path}: a read-only store cannot be transactional")
        self.read_only = read_only
        self.transactional = transactional
        self._secondary_dir: str | None = None
        self._memory = rocksdb_memory or process_default_memory()
        if read_only:
            metadata = read_metadata(self.path)
            metadata.check_compatible(requested, self.path)
        else:
            metadata = prepare_store_dir(self.path, requested, self._memory)
        self.metadata = metadata
        self.name = metadata.name
        db = self._open_db(os.path.join(self.path, DB_DIR_NAME))
        self._rocksdb = db  # the RocksDB itself, also when writes go through the buffer
        self._txn: TransactionBuffer | None = None
        if transactional:
            db.set_write_options(_write_options(wal=True))
            self._txn = TransactionBuffer(db, path=self.path)
        self._db: Any = db if self._txn is None else self._txn
        self._open = True
        self._memtable_filter_off = False

    def _open_db(self, db_path: str) -> rocksdict.Rdict:
        if not os.path.isdir(db_path):
            raise InvalidStoreError(f"{self.path} has store metadata but no {DB_DIR_NAME}/ directory")
        options = self._memory.options(self.name, create=False)  # a failing config setter is a ConfigError
        if self.read_only:
            self._secondary_dir = tempfile.mkdtemp(prefix="stateful-streams-secondary-")
            try:
                return _rdict(db_path, options, rocksdict.AccessType.secondary(self._secondary_dir))
            except Exception as exc:  # rocksdict raises plain Exception for RocksDB status errors
                shutil.rmtree(self._secondary_dir, ignore_errors=True)
                raise InvalidStoreError(f"cannot open store {self.path} read-only: {exc}") from exc
        try:
            db = _rdict(db_path, options)
        except Exception as exc:  # rocksdict raises plain Exception for RocksDB status errors
            if "lock" in str(exc).lower():
                raise InvalidStoreError(
                    f"store {self.path} is already open for writing (by this or another process); "
                    f"open it with read_only=True to inspect it: {exc}"
                ) from exc
            raise InvalidStoreError(f"cannot open store {self.path}: {exc}") from exc
        db.set_write_options(_write_options())
        return db

    def _iter_below(self, upper: bytes) -> tuple[Any, rocksdict.ReadOptions]:
        """An iterator that ends before ``upper``, and the read options holding that bound:
        keep them referenced while the iterator is used (rocksdict's iterator points into
        them; once they are freed the bound is garbage). Without a bound a seek or step
        past the last live row of a range walks every deleted row after it to the next live
        one, which after many deletes (sessions that grew) is most of a segment: reads
        hundreds of times slower until RocksDB compacts the deletes away
        (docs/stores.md, "Performance"). Callers still check their range: a transactional
        store's buffered writes are not bounded."""
        options = rocksdict.ReadOptions()
        options.set_iterate_upper_bound(upper)
        return self._db.iter(options), options

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._open

    def _check_open(self) -> None:
        if not self._open:
            raise InvalidStoreError(f"store {self.name!r} at {self.path} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyStoreError(f"store {self.name!r} at {self.path} was opened read-only")

    def _on_flush(self) -> None:
        """Hook: write in-memory state into the RocksDB before it is flushed."""

    def flush(self) -> None:
        """Persist everything written so far (the runtime calls this before checkpointing).

        Transactional stores only move their in-memory state into the buffer: what is in
        RocksDB is committed already, and the buffer waits for :meth:`commit_transaction`.
        """
        self._check_open()
        if self.read_only:
            return
        self._on_flush()
        if self._txn is None:
            self._db.flush(True)

    # -- transactions (exactly-once) -------------------------------------------------------

    def commit_transaction(self) -> int:
        """Write the buffered writes (and the in-memory state ``flush`` persists) into RocksDB in
        one write-ahead-logged batch; returns the number of entries written. 0 and nothing
        done for a non-transactional store."""
        if self._txn is None:
            return 0
        self._check_writable()
        self._on_flush()
        return self._txn.commit()

    def abort_transaction(self) -> None:
        """Drop the buffered writes and reload the in-memory state (observed stream time,
        segments) from the committed RocksDB. No-op for a non-transactional store."""
        if self._txn is None:
            return
        self._check_writable()
        self._txn.discard()
        self._on_refresh()

    @property
    def uncommitted_bytes(self) -> int:
        """Approximate memory held by buffered writes (0 when not transactional)."""
        return 0 if self._txn is None else self._txn.pending_bytes

    def restoring(self) -> AbstractContextManager[Any]:
        """Context for changelog restoration: writes go straight to RocksDB (committed data).
        A transactional store refuses to enter it while writes are buffered."""
        if self._txn is None:
            return nullcontext()
        return self._restoring_directly(self._txn)

    @contextmanager
    def _restoring_directly(self, txn: TransactionBuffer) -> Iterator[None]:
        self._check_writable()
        self._on_flush()  # in-memory state not yet written counts as buffered: direct() refuses it
        with txn.direct():
            yield
            self._on_flush()  # state derived from restored records (observed time) is committed state

    def end_restoration(self) -> None:
        """The store's task starts processing: the memtable filter its restoration turned off
        serves the task's reads again (from the next memtable on)."""
        if self._memtable_filter_off and self._open:
            self._set_memtable_filter(on=True)

    def _set_memtable_filter(self, *, on: bool) -> None:
        options = self._memory.memtable_filter(on=on)
        if options is not None:
            self._rocksdb.set_options(options)
        self._memtable_filter_off = not on

    def refresh(self) -> None:
        """Read-only stores: catch up with what the writing process has flushed since."""
        self._check_open()
        if self.read_only:
            self._db.try_catch_up_with_primary()
            self._on_refresh()

    def _on_refresh(self) -> None:
        """Hook: reload in-memory state from the RocksDB (after a secondary catch-up, or after
        a transactional store dropped its buffer)."""

    def stats(self) -> StoreStats:
        """What the maintenance operators and ``stateful-streams stores`` report (each kind's own)."""
        raise NotImplementedError

    def close(self) -> None:
        """Flush and release the RocksDB; closing twice is harmless. A transactional store drops
        its uncommitted writes (a close never commits) and flushes only committed data."""
        if not self._open:
            return
        try:
            if self._txn is not None:
                self._txn.discard()
            elif not self.read_only:
                self._on_flush()
            if not self.read_only:
                self._db.flush(True)
        finally:
            self._open = False
            self._db.close()
            del self._db, self._rocksdb
            if self._secondary_dir is not None:
                shutil.rmtree(self._secondary_dir, ignore_errors=True)
                self._secondary_dir = None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- snapshots -------------------------------------------------------------------------

    def create_checkpoint(self, target_dir: str) -> None:
        """A consistent copy of what RocksDB holds, in the new directory ``target_dir``
        (RocksDB hard-links the SST files, so it takes milliseconds on the same filesystem).

        Non-transactional stores flush first (writes skip the write-ahead log). A
        transactional store copies only committed data and refuses while writes are
        buffered: a snapshot must never hold an uncommitted transaction.
        """
        self._check_open()
        if self._txn is not None:
            if not self._txn.is_empty:
                raise InvalidStoreError(
                    f"store {self.name!r} at {self.path}: {self._txn.pending_bytes} bytes of uncommitted "
                    f"writes are buffered; a snapshot is taken right after a commit"
                )
        elif not self.read_only:
            self._on_flush()
            self._db.flush(True)
        rocksdict.Checkpoint(self._rocksdb).create_checkpoint(target_dir)

    # -- maintenance -----------------------------------------------------------------------

    def bytes_on_disk(self) -> int:
        """Size of the store directory's files."""
        return bytes_on_disk(self.path)

    def _rocksdb_int(self, prop: str) -> int:
        value = self._db.property_int_value(prop)
        return int(value) if value is not None else 0

    def compact(self) -> CompactionResult:
        """Full manual RocksDB compaction: reclaims space of deleted and overwritten rows."""
        self._check_writable()
        self._on_flush()
        self._db.flush(True)
        before = self.bytes_on_disk()
        started = time.monotonic()
        self._db.compact_range(None, None)
        elapsed = time.monotonic() - started
        return CompactionResult(bytes_before=before, bytes_after=self.bytes_on_disk(), duration_s=elapsed)

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        state = "open" if self._open else "closed"
        return f"{type(self).__name__}({self.name!r}, {self.path!r}, {mode}, {state})"
