"""A per-store write buffer so RocksDB never holds writes of an uncommitted transaction.

Under exactly-once processing a task's state must match its committed Kafka
transactions (the KIP-892 idea). A transactional store writes into a
:class:`TransactionBuffer` in place of its ``rocksdict.Rdict``: reads see the buffer
over the committed data, and :meth:`TransactionBuffer.commit` applies the buffer in
one write-ahead-logged RocksDB write batch once the Kafka transaction has committed.
An abort (or a crash) simply loses the buffer, leaving RocksDB at the last commit.

Restoring a changelog writes committed data, so it goes straight to RocksDB:
inside :meth:`TransactionBuffer.direct`, or with :meth:`TransactionBuffer.write`
while nothing is buffered.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import rocksdict

from airflow_stateful_provider.streams.errors import IllegalStateError

__all__ = ["ENTRY_OVERHEAD", "TransactionBuffer"]

#: Approximate per-entry memory overhead (dict slot, list slot, object headers) in bytes.
ENTRY_OVERHEAD = 64
_MISSING: Any = object()


def _wal_write_options() -> rocksdict.WriteOptions:
    opts = rocksdict.WriteOptions()
    # A commit must survive a process kill; the stores' default skips the WAL. (rocksdict's
    # stub declares disable_wal a method; the extension's attribute is a setter.)
    opts.disable_wal = False  # type: ignore[method-assign, assignment]
    return opts


class TransactionBuffer:
    """Buffered writes over a raw-mode ``rocksdict.Rdict``, with the Rdict methods the stores
    use (``get``/``put``/``delete``/``delete_range``/``iter``/``write``); anything else
    (``flush``, ``compact_range``, ``close``, ...) goes to the base db and sees only
    committed data.

    Pending state: ``_pending`` maps key -> value (None: deleted), ``_keys`` holds the same
    keys sorted; ``_begins``/``_ends`` are the range tombstones, sorted and disjoint. A
    range delete drops the buffered entries in its range, so a buffered entry always wins
    over a range tombstone, and commit can write the ranges before the entries.
    """

    __slots__ = ("_db", "path", "_pending", "_keys", "_begins", "_ends", "_entry_bytes", "_range_bytes",
                 "_direct", "_version", "_wal")

    def __init__(self, db: rocksdict.Rdict, *, path: str | None = None) -> None:
        self._db = db
        self.path = path if path is not None else db.path()
        self._direct = 0
        self._version = 0  # bumped on every buffered write: open iterators re-seek at their next move
        self._wal = _wal_write_options()
        self._reset()

    def _reset(self) -> None:
        self._pending: dict[bytes, bytes | None] = {}
        self._keys: list[bytes] = []
        self._begins: list[bytes] = []
        self._ends: list[bytes] = []
        self._entry_bytes = 0
        self._range_bytes = 0
        self._version += 1

    # -- size ------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Buffered entries (puts and deletes) plus range tombstones."""
        return len(self._pending) + len(self._begins)

    @property
    def is_empty(self) -> bool:
        return not self._pending and not self._begins

    @property
    def pending_bytes(self) -> int:
        """Approximate memory held: key and value lengths plus :data:`ENTRY_OVERHEAD` each."""
        return self._entry_bytes + self._range_bytes

    # -- reads -----------------------------------------------------------------------------

    def _range_at(self, key: bytes) -> int:
        """Index of the range tombstone holding ``key``, or -1."""
        i = bisect_right(self._begins, key) - 1
        if i >= 0 and key < self._ends[i]:
            return i
        return -1

    def get(self, key: bytes) -> bytes | None:
        if self._pending:
            value: bytes | None = self._pending.get(key, _MISSING)
            if value is not _MISSING:
                return value
        if self._begins and self._range_at(key) >= 0:
            return None
        return self._db.get(key)

    def iter(self, *args: Any) -> Any:
        """An iterator over the buffer merged with the base db; the base db's own iterator
        while nothing is buffered. Read options (``args``) apply to the base db only."""
        if not self._pending and not self._begins:
            return self._db.iter(*args)
        return _MergedIter(self, self._db.iter(*args))

    # -- writes ----------------------------------------------------------------------------

    def _set(self, key: bytes, value: bytes | None) -> None:
        if type(key) is not bytes:
            raise TypeError(f"store {self.path}: keys must be bytes, got {type(key).__name__}")
        old = self._pending.get(key, _MISSING)
        self._version += 1
        if old is _MISSING:
            insort(self._keys, key)
            self._entry_bytes += len(key) + ENTRY_OVERHEAD
        elif old is not None:
            self._entry_bytes -= len(old)
        if value is not None:
            self._entry_bytes += len(value)
        self._pending[key] = value

    def put(self, key: bytes, value: bytes) -> None:
        if self._direct:
            self._db.put(key, value)
            return
        if type(value) is not bytes:
            raise TypeError(f"store {self.path}: values must be bytes, got {type(value).__name__}")
        self._set(key, value)

    def delete(self, key: bytes) -> None:
        if self._direct:
            self._db.delete(key)
            return
        self._set(key, None)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete ``[begin, end)``. ``end < begin`` is refused before it reaches RocksDB (which
        would reject it and then fail every later write until reopened)."""
        if type(begin) is not bytes or type(end) is not bytes:
            raise TypeError(f"store {self.path}: delete_range bounds must be bytes")
        if end < begin:
            raise ValueError(f"store {self.path}: delete_range end {end!r:.40} comes before begin {begin!r:.40}")
        if begin == end:
            return
        if self._direct:
            self._db.delete_range(begin, end)
            return
        keys, pending = self._keys, self._pending
        lo, hi = bisect_left(keys, begin), bisect_left(keys, end)
        if lo < hi:
            for key in keys[lo:hi]:
                value = pending.pop(key)
                self._entry_bytes -= len(key) + ENTRY_OVERHEAD + (0 if value is None else len(value))
            del keys[lo:hi]
        begins, ends = self._begins, self._ends
        i = bisect_left(ends, begin)  # first range ending at or after begin: overlaps or touches
        j = bisect_right(begins, end)  # ranges starting at or before end
        if i < j:
            begin = min(begin, begins[i])
            end = max(end, ends[j - 1])
        begins[i:j] = [begin]
        ends[i:j] = [end]
        self._range_bytes = sum(len(b) + len(e) + ENTRY_OVERHEAD for b, e in zip(begins, ends, strict=True))
        self._version += 1

    def write(self, batch: rocksdict.WriteBatch, *args: Any) -> None:
        """Apply ``batch`` to the base db directly (committed data, e.g. a restored changelog);
        refused while writes are buffered, since it would land before them."""
        self.require_empty("write a batch straight to RocksDB")
        self._db.write(batch, *args)

    def require_empty(self, action: str) -> None:
        """Raise :class:`IllegalStateError` (naming the store and ``action``) if writes are buffered."""
        if not self.is_empty:
            raise IllegalStateError(
                f"store {self.path}: cannot {action} while {len(self)} uncommitted writes are buffered; "
                f"commit or abort the transaction first"
            )

    @contextmanager
    def direct(self) -> Iterator[TransactionBuffer]:
        """Within the block every call goes straight to the base db (restoration)."""
        self.require_empty("write straight to RocksDB (restore)")
        self._direct += 1
        try:
            yield self
        finally:
            self._direct -= 1

    # -- transaction end -------------------------------------------------------------------

    def commit(self) -> int:
        """Write the buffer in one write-ahead-logged batch, then empty it; returns the number of
        entries written (range tombstones included, overlapping ones merged). On failure the
        buffer is kept."""
        count = len(self)
        if not count:
            return 0
        batch = rocksdict.WriteBatch(raw_mode=True)
        for begin, end in zip(self._begins, self._ends, strict=True):
            batch.delete_range(begin, end)
        put, delete = batch.put, batch.delete
        for key, value in self._pending.items():
            if value is None:
                delete(key)
            else:
                put(key, value)
        self._db.write(batch, self._wal)
        self._reset()
        return count

    def discard(self) -> None:
        """Forget everything buffered."""
        self._reset()

    # -- everything else -------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name == "_db":  # not yet set (e.g. during copy); avoid recursing
            raise AttributeError(name)
        return getattr(self._db, name)

    def __repr__(self) -> str:
        return f"TransactionBuffer({self.path!r}, {len(self)} pending, ~{self.pending_bytes} bytes)"


class _MergedIter:
    """RdictIter-like iterator over buffer + base db.

    The base iterator is skipped past keys the buffer holds (its entry wins) and past
    range tombstones (one seek per range). The current entry comes from the side with
    the smaller (forward) or larger (backward) key. A direction switch, or a buffer
    change since the last move, re-seeks both sides around the current key. Moving an
    invalid iterator is a no-op (RdictIter would crash).
    """

    __slots__ = ("_buf", "_base", "_bi", "_bk", "_pk", "_key", "_value", "_from_base", "_forward", "_version")

    def __init__(self, buf: TransactionBuffer, base: rocksdict.RdictIter) -> None:
        self._buf, self._base = buf, base
        self._bi = 0
        self._bk: bytes | None = None
        self._pk: bytes | None = None
        self._key: bytes | None = None
        self._value: bytes | None = None
        self._from_base = False
        self._forward = True
        self._version = buf._version

    def valid(self) -> bool:
        return self._key is not None

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        if self._key is None:
            return None
        return self._base.value() if self._from_base else self._value

    def status(self) -> None:
        self._base.status()

    # -- settling each side ------------------------------------------------------------------

    def _base_forward(self) -> bytes | None:
        base, buf = self._base, self._buf
        pending = buf._pending
        while base.valid():
            key: bytes = base.key()
            if key in pending:
                base.next()
                continue
            if buf._begins:
                i = buf._range_at(key)
                if i >= 0:
                    base.seek(buf._ends[i])
                    continue
            return key
        return None

    def _base_backward(self) -> bytes | None:
        base, buf = self._base, self._buf
        pending = buf._pending
        while base.valid():
            key: bytes = base.key()
            if key in pending:
                base.prev()
                continue
            if buf._begins:
                i = buf._range_at(key)
                if i >= 0:
                    begin = buf._begins[i]
                    base.seek_for_prev(begin)
                    if base.valid() and base.key() == begin:
                        base.prev()
                    continue
            return key
        return None

    def _buf_forward(self) -> bytes | None:
        keys, pending = self._buf._keys, self._buf._pending
        bi, n = self._bi, len(keys)
        while bi < n and pending[keys[bi]] is None:
            bi += 1
        self._bi = bi
        return keys[bi] if bi < n else None

    def _buf_backward(self) -> bytes | None:
        keys, pending = self._buf._keys, self._buf._pending
        bi = self._bi
        while bi >= 0 and pending[keys[bi]] is None:
            bi -= 1
        self._bi = bi
        return keys[bi] if bi >= 0 else None

    def _pick(self) -> None:
        bk, pk = self._bk, self._pk
        if pk is None or (bk is not None and (bk < pk if self._forward else bk > pk)):
            self._key, self._from_base, self._value = bk, True, None
        else:
            self._key, self._from_base, self._value = pk, False, self._buf._pending[pk]

    def _settle(self, forward: bool) -> None:
        self._forward = forward
        self._version = self._buf._version
        if forward:
            self._bk, self._pk = self._base_forward(), self._buf_forward()
        else:
            self._bk, self._pk = self._base_backward(), self._buf_backward()
        self._pick()

    # -- positioning ---------------------------------------------------------------------------

    def _seek_forward(self, target: bytes, inclusive: bool) -> None:
        base = self._base
        base.seek(target)
        if not inclusive and base.valid() and base.key() == target:
            base.next()
        keys = self._buf._keys
        self._bi = bisect_left(keys, target) if inclusive else bisect_right(keys, target)
        self._settle(True)

    def _seek_backward(self, target: bytes, inclusive: bool) -> None:
        base = self._base
        base.seek_for_prev(target)
        if not inclusive and base.valid() and base.key() == target:
            base.prev()
        keys = self._buf._keys
        self._bi = (bisect_right(keys, target) if inclusive else bisect_left(keys, target)) - 1
        self._settle(False)

    def seek(self, key: bytes) -> None:
        self._seek_forward(key, True)

    def seek_for_prev(self, key: bytes) -> None:
        self._seek_backward(key, True)

    def seek_to_first(self) -> None:
        self._base.seek_to_first()
        self._bi = 0
        self._settle(True)

    def seek_to_last(self) -> None:
        self._base.seek_to_last()
        self._bi = len(self._buf._keys) - 1
        self._settle(False)

    def next(self) -> None:
        key = self._key
        if key is None:
            return
        if not self._forward or self._version != self._buf._version:
            self._seek_forward(key, False)
        elif self._from_base:
            self._base.next()
            self._bk = self._base_forward()
            self._pick()
        else:
            self._bi += 1
            self._pk = self._buf_forward()
            self._pick()

    def prev(self) -> None:
        key = self._key
        if key is None:
            return
        if self._forward or self._version != self._buf._version:
            self._seek_backward(key, False)
        elif self._from_base:
            self._base.prev()
            self._bk = self._base_backward()
            self._pick()
        else:
            self._bi -= 1
            self._pk = self._buf_backward()
            self._pick()
