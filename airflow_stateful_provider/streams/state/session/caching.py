"""Record caching: Kafka Streams' write-back cache in front of DSL session stores.

Without a cache every update of a session aggregate costs a changelog write and a
downstream record, and a session that grows by one event per record rewrites (and
retracts) itself each time. The cache keeps the latest value of each touched session and
writes it through (store, changelog, downstream) only when the task commits or the cache
runs over its byte budget; successive updates of the same session between two flushes
collapse into one, and a session created and merged away between two flushes never
reaches the store, the changelog or downstream at all.

Invariants:
- reads see the cache first: a cached value shadows the store, a cached removal hides it;
- a flush writes entries in the order they were last touched, each with the timestamp of
  the record that last touched it (so changelog records carry the same timestamps as
  without caching), then calls the flush listener with (session, new value, old value);
- except that a removal is never written before the sessions cached for its key: those
  touched after it go into the store (and the changelog) right before it, and downstream
  at their turn. A session merged into a larger one thus leaves the changelog only after
  the larger one is in it: at-least-once, a crash may cut the changelog anywhere in a
  flush, and a cut between the two leaves both to the restored store (whose merge by
  the records processed again counts the inner one once: SessionWindowAggregateProcessor),
  where the other order would leave neither and lose the clicks of the last commit;
- removal of a session the store never had is dropped (nothing to retract). The cache
  knows a session is absent from the store, without a lookup, when it is put right after
  a ``find_sessions`` over a range containing it that did not return it from the store
  (what every session merge does); such a session, removed before a flush, just leaves
  the cache. Otherwise the flush asks the store;
- ``statestore_cache_max_bytes`` = 0 disables caching (every write goes through at once).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from airflow_stateful_provider.streams.state.session.key import SessionKey
from airflow_stateful_provider.streams.state.session.store import SessionStore

__all__ = ["CachingSessionStore", "SessionFlushListener"]

#: (session, new aggregate bytes or None when removed, previous bytes when removed else None)
SessionFlushListener = Callable[[SessionKey, "bytes | None", "bytes | None"], None]

#: Bookkeeping bytes counted per entry besides its key and value (Kafka counts ~ 64 too).
_ENTRY_OVERHEAD = 64

# What the cache knows about the store's copy of a cached session.
_UNKNOWN, _IN_STORE, _NOT_IN_STORE = 0, 1, 2


class CachingSessionStore:
    """Write-back cache over a (changelogging) byte session store."""

    def __init__(self, inner: SessionStore, max_bytes: int, *, record_timestamp: Callable[[], int],
                 set_record_timestamp: Callable[[int | None], None]) -> None:
        self.inner = inner
        self.max_bytes = max_bytes
        self._record_timestamp = record_timestamp
        self._set_record_timestamp = set_record_timestamp
        #: session -> (aggregate bytes or None for a removal, timestamp of the last write,
        #: whether the store has the session)
        self._dirty: OrderedDict[SessionKey, tuple[bytes | None, int, int]] = OrderedDict()
        #: The last find_sessions: key, range, and the (session, value) rows the store
        #: returned (a handful at most: one key's sessions near one timestamp).
        self._last_find: tuple[bytes, int, int, list[tuple[SessionKey, bytes]]] | None = None
        #: record key -> its sessions in ``_dirty`` (find_sessions merges them with the store)
        self._by_key: dict[bytes, set[SessionKey]] = {}
        self._bytes = 0
        self._listener: SessionFlushListener | None = None

    def set_flush_listener(self, listener: SessionFlushListener) -> None:
        """Called for every session written through; DSL processors forward from it."""
        self._listener = listener

    def __getattr__(self, name: str) -> Any:
        # name, persistent, stats, compact, enforce_retention, restore_batch, ...
        return getattr(self.inner, name)

    # ------------------------------------------------------------------ writes

    def put(self, session: SessionKey, aggregate: bytes | None) -> None:
        self._cache(session, aggregate)

    def remove(self, session: SessionKey) -> None:
        self._cache(session, None)

    def _cache(self, session: SessionKey, value: bytes | None) -> None:
        if type(session) is not SessionKey:
            session = SessionKey(*session)
        previous = self._dirty.pop(session, None)
        if previous is not None:
            self._bytes -= _size(session, previous[0])
            in_store = previous[2]
        else:
            in_store = self._store_has(session)
        if value is None and in_store == _NOT_IN_STORE:
            self._forget_key(session)  # created and removed between two flushes
            return
        self._dirty[session] = (value, self._record_timestamp(), in_store)
        sessions = self._by_key.get(session.key)
        if sessions is None:
            self._by_key[session.key] = {session}
        else:
            sessions.add(session)
        self._bytes += _size(session, value)
        if self._bytes > self.max_bytes:
            self._evict()

    def _store_has(self, session: SessionKey) -> int:
        last = self._last_find
        if last is None or last[0] != session.key or session.end < last[1] or session.start > last[2]:
            return _UNKNOWN
        for stored, _ in last[3]:
            if stored == session:
                return _IN_STORE
        return _NOT_IN_STORE

    def _evict(self) -> None:
        """Write through the least recently touched entries until under 90 % of the budget;
        with a removal, the sessions cached for its key (module docstring). The entry just
        cached stays, whatever the budget: a merge caches the removal first, then the session
        that replaces it, which must not reach the changelog after the removal."""
        target = self.max_bytes * 0.9
        while len(self._dirty) > 1 and self._bytes > target:
            session, (value, timestamp, in_store) = self._dirty.popitem(last=False)
            self._forget(session, value)
            entries = [(session, value, timestamp, in_store)]
            if value is None:
                for other in sorted(self._by_key.get(session.key, ())):
                    other_value, other_timestamp, other_in_store = self._dirty[other]
                    if other_value is not None:
                        del self._dirty[other]
                        self._forget(other, other_value)
                        entries.append((other, other_value, other_timestamp, other_in_store))
            self._write_out(entries)

    # ------------------------------------------------------------------ reads

    def find_sessions(self, key: bytes, earliest_session_end: int,
                      latest_session_start: int) -> list[tuple[SessionKey, bytes]]:
        stored = self.inner.find_sessions(key, earliest_session_end, latest_session_start)
        self._last_find = (key, earliest_session_end, latest_session_start, stored)
        cached = self._by_key.get(key)
        if not cached:
            return list(stored)
        merged = {session: value for session, value in stored}
        for session in cached:
            if session.end >= earliest_session_end and session.start <= latest_session_start:
                value = self._dirty[session][0]
                if value is None:
                    merged.pop(session, None)
                else:
                    merged[session] = value
        if len(merged) < 2:
            return list(merged.items())
        return sorted(merged.items(), key=_end_then_start)

    def fetch(self, key: bytes) -> list[tuple[SessionKey, bytes]]:
        return self.find_sessions(key, 0, 2**63 - 1)

    def fetch_session(self, key: bytes, start: int, end: int) -> bytes | None:
        entry = self._dirty.get(SessionKey(key, start, end))
        if entry is not None:
            return entry[0]
        return self.inner.fetch_session(key, start, end)

    def find_sessions_by_end(self, earliest_session_end: int,
                             latest_session_end: int) -> list[tuple[SessionKey, bytes]]:
        self.flush_cache()
        return self.inner.find_sessions_by_end(earliest_session_end, latest_session_end)

    def all(self) -> list[tuple[SessionKey, bytes]]:
        self.flush_cache()
        return self.inner.all()

    # ------------------------------------------------------------------ flush

    def flush_cache(self) -> int:
        """Write every cached entry through (module docstring); returns how many."""
        entries, self._dirty, self._by_key, self._bytes = self._dirty, OrderedDict(), {}, 0
        self._write_out([(session, *entry) for session, entry in entries.items()])
        return len(entries)

    def flush(self) -> None:
        self.flush_cache()
        self.inner.flush()

    def close(self) -> None:
        """Closing without a flush drops the cache: an unclean close must not write
        anything the task did not commit (a clean close flushes on commit first)."""
        self._dirty.clear()
        self._by_key.clear()
        self._bytes = 0
        self._last_find = None
        self.inner.close()

    def _forget(self, session: SessionKey, value: bytes | None) -> None:
        self._bytes -= _size(session, value)
        self._forget_key(session)

    def _forget_key(self, session: SessionKey) -> None:
        sessions = self._by_key.get(session.key)
        if sessions is not None:
            sessions.discard(session)
            if not sessions:
                del self._by_key[session.key]

    def _write_out(self, entries: list[tuple[SessionKey, bytes | None, int, int]]) -> None:
        """Write ``entries`` (session, value or None, timestamp, in_store), given in order of
        last touch, through to the store and the flush listener (module docstring). What
        each removal retracts is read first: the sessions written before it (those of its
        key too now) move the store's stream time, which may hide it."""
        self._last_find = None  # the store changes: what the last find saw no longer holds
        retracted = [None if value is not None or in_store == _NOT_IN_STORE
                     else self.inner.fetch_session(session.key, session.start, session.end)
                     for session, value, _, in_store in entries]
        puts_of: dict[bytes, list[int]] | None = None  # key -> indices of its sessions' entries
        written_early: set[int] = set()
        for i, ((session, value, timestamp, _), old) in enumerate(zip(entries, retracted, strict=True)):
            if value is None:
                if old is None:
                    continue  # created and removed between two flushes: nothing to retract
                if puts_of is None:
                    puts_of = {}
                    for j, entry in enumerate(entries):
                        if entry[1] is not None:
                            puts_of.setdefault(entry[0].key, []).append(j)
                for j in puts_of.get(session.key, ()):
                    if j > i and j not in written_early:
                        later, later_value, later_timestamp, _ = entries[j]
                        self._stamped(later_timestamp, self.inner.put, later, later_value)
                        written_early.add(j)
                self._stamped(timestamp, self.inner.remove, session)
            elif i not in written_early:
                self._stamped(timestamp, self.inner.put, session, value)
            if self._listener is not None:
                self._stamped(timestamp, self._listener, session, value, old)

    def _stamped(self, timestamp: int, write: Callable[..., None], *args: Any) -> None:
        """``write(*args)`` with the timestamp of the record that last touched the entry."""
        self._set_record_timestamp(timestamp)
        try:
            write(*args)
        finally:
            self._set_record_timestamp(None)


def _end_then_start(item: tuple[SessionKey, bytes]) -> tuple[int, int]:
    return item[0].end, item[0].start


def _size(session: SessionKey, value: bytes | None) -> int:
    return len(session.key) + 16 + (len(value) if value is not None else 0) + _ENTRY_OVERHEAD

