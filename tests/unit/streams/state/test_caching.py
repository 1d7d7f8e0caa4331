"""The write-back record cache in front of session stores (state/session/caching.py)."""

from __future__ import annotations

from airflow_stateful_provider.streams.state.common.changelog_records import ListChangelogWriter
from airflow_stateful_provider.streams.state.session.caching import CachingSessionStore
from airflow_stateful_provider.streams.state.session.changelogging import ChangeloggingSessionStore
from airflow_stateful_provider.streams.state.session.in_memory import InMemorySessionStore
from airflow_stateful_provider.streams.state.session.key import SessionKey, session_key_to_bytes


class Clock:
    def __init__(self) -> None:
        self.now = 0
        self.override = None

    def timestamp(self) -> int:
        return self.now if self.override is None else self.override

    def set_override(self, value):
        self.override = value


def cached_store(max_bytes: int = 1 << 20):
    clock = Clock()
    changelog = ListChangelogWriter()
    inner = ChangeloggingSessionStore(InMemorySessionStore(10_000_000, "s"), changelog, clock.timestamp)
    store = CachingSessionStore(inner, max_bytes, record_timestamp=clock.timestamp,
                                set_record_timestamp=clock.set_override)
    flushed = []
    store.set_flush_listener(lambda session, new, old: flushed.append((session, new, old)))
    return store, inner, changelog, clock, flushed


def test_updates_of_a_session_collapse_until_the_flush():
    store, inner, changelog, clock, flushed = cached_store()
    for count, end in enumerate((0, 5, 9), start=1):
        clock.now = end
        if end:
            store.remove(SessionKey(b"a", 0, end - (4 if end == 9 else 5)))
        store.put(SessionKey(b"a", 0, end), count.to_bytes(8, "big"))
    assert store.find_sessions(b"a", 0, 100) == [(SessionKey(b"a", 0, 9), (3).to_bytes(8, "big"))]
    assert inner.fetch(b"a") == [] and len(changelog) == 0 and flushed == []

    assert store.flush_cache() == 3
    # the two intermediate sessions never reached the store: no write, no retraction
    assert [(r.key, r.value, r.timestamp) for r in changelog] == [
        (session_key_to_bytes(SessionKey(b"a", 0, 9)), (3).to_bytes(8, "big"), 9)]
    assert flushed == [(SessionKey(b"a", 0, 9), (3).to_bytes(8, "big"), None)]
    assert inner.fetch(b"a") == [(SessionKey(b"a", 0, 9), (3).to_bytes(8, "big"))]


def test_removing_a_flushed_session_retracts_it_with_its_old_value():
    store, inner, changelog, clock, flushed = cached_store()
    clock.now = 1
    store.put(SessionKey(b"k", 1, 1), b"one")
    store.flush_cache()
    clock.now = 3
    store.remove(SessionKey(b"k", 1, 1))
    store.put(SessionKey(b"k", 1, 3), b"two")
    assert store.fetch_session(b"k", 1, 1) is None and store.fetch_session(b"k", 1, 3) == b"two"
    store.flush_cache()
    assert flushed[1:] == [(SessionKey(b"k", 1, 1), None, b"one"), (SessionKey(b"k", 1, 3), b"two", None)]
    assert [(r.value, r.timestamp) for r in changelog.records[1:]] == [(b"two", 3), (None, 3)]


def test_entries_are_written_with_the_timestamp_of_their_last_write():
    store, inner, changelog, clock, flushed = cached_store()
    clock.now = 100
    store.put(SessionKey(b"x", 100, 100), b"1")
    clock.now = 250
    store.put(SessionKey(b"y", 250, 250), b"1")
    clock.now = 999  # the commit happens later
    store.flush_cache()
    assert [r.timestamp for r in changelog] == [100, 250]
    assert clock.override is None


def test_over_budget_the_least_recently_touched_entries_are_written_first():
    store, inner, changelog, clock, flushed = cached_store(max_bytes=400)
    for i in range(10):
        store.put(SessionKey(b"key%d" % i, i, i), b"v")
    assert 0 < len(changelog) < 10
    written = [s.key for s, _, _ in flushed]
    assert written == [b"key%d" % i for i in range(len(written))]
    # everything is still readable, from the cache or the store
    for i in range(10):
        assert store.fetch_session(b"key%d" % i, i, i) == b"v"


def test_close_without_flush_writes_nothing():
    store, inner, changelog, clock, flushed = cached_store()
    store.put(SessionKey(b"a", 0, 0), b"v")
    store.close()
    assert len(changelog) == 0 and flushed == []


class CountingStore:
    """Wraps a session store and counts fetch_session calls."""

    def __init__(self, inner):
        self.inner = inner
        self.fetches = 0

    def fetch_session(self, *args):
        self.fetches += 1
        return self.inner.fetch_session(*args)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_session_merged_away_before_any_flush_leaves_the_cache_without_a_store_lookup():
    store, inner, changelog, clock, flushed = cached_store()
    counting = CountingStore(inner)
    store.inner = counting
    for ts in (0, 5, 9):  # what a session aggregation does for a@0, a@5, a@9
        found = store.find_sessions(b"a", ts - 300, ts + 300)
        for session, _ in found:
            store.remove(session)
        store.put(SessionKey(b"a", 0, ts), b"agg")
    assert list(store._dirty) == [SessionKey(b"a", 0, 9)]
    store.flush_cache()
    assert counting.fetches == 0 and len(changelog) == 1


def test_a_session_evicted_between_find_and_removal_is_still_retracted():
    store, inner, changelog, clock, flushed = cached_store(max_bytes=10_000)
    store.put(SessionKey(b"a", 0, 0), b"x")
    store.put(SessionKey(b"a", 1, 1), b"y")
    found = store.find_sessions(b"a", 0, 10)  # both from the cache, none from the store
    assert [s for s, _ in found] == [SessionKey(b"a", 0, 0), SessionKey(b"a", 1, 1)]
    store.max_bytes = 150  # the next write evicts the oldest entry, [0,0], into the store
    store.remove(SessionKey(b"a", 1, 1))
    assert inner.fetch_session(b"a", 0, 0) == b"x"
    store.remove(SessionKey(b"a", 0, 0))
    store.flush_cache()
    assert inner.fetch(b"a") == []
    assert (SessionKey(b"a", 0, 0), None, b"x") in flushed


def test_a_flush_writes_a_merged_session_before_removing_the_ones_it_replaced():
    """A crash may cut the changelog anywhere in a flush (at-least-once): the merged session
    goes first, so no cut leaves the store without the clicks of both. Downstream keeps
    Kafka Streams' order, and the removal still retracts the old value when the merged
    session moved the store's stream time past the removed one."""
    clock = Clock()
    changelog = ListChangelogWriter()
    inner = ChangeloggingSessionStore(InMemorySessionStore(100, "s"), changelog, clock.timestamp)
    store = CachingSessionStore(inner, 1 << 20, record_timestamp=clock.timestamp,
                                set_record_timestamp=clock.set_override)
    flushed = []
    store.set_flush_listener(lambda session, new, old: flushed.append((session, new, old)))
    store.put(SessionKey(b"a", 0, 0), b"1")
    store.flush_cache()
    clock.now = 50
    store.remove(SessionKey(b"a", 0, 0))  # what a merge does, in Kafka Streams' order
    store.put(SessionKey(b"a", 0, 50), b"2")
    store.put(SessionKey(b"b", 50, 50), b"1")
    clock.now = 1000
    store.remove(SessionKey(b"a", 0, 50))  # the session grew on: [0, 50] is merged away in the cache
    store.put(SessionKey(b"a", 0, 1000), b"9")
    store.flush_cache()
    assert [(r.key, r.value) for r in changelog.records[1:]] == [
        (session_key_to_bytes(SessionKey(b"a", 0, 1000)), b"9"),
        (session_key_to_bytes(SessionKey(b"a", 0, 0)), None),
        (session_key_to_bytes(SessionKey(b"b", 50, 50)), b"1")]
    assert flushed[1:] == [(SessionKey(b"a", 0, 0), None, b"1"), (SessionKey(b"b", 50, 50), b"1", None),
                           (SessionKey(b"a", 0, 1000), b"9", None)]


def test_evicting_a_removal_writes_the_sessions_cached_for_its_key_first():
    store, inner, changelog, clock, flushed = cached_store(max_bytes=250)  # three entries fit
    store.put(SessionKey(b"a", 0, 0), b"1")
    store.flush_cache()
    store.remove(SessionKey(b"a", 0, 0))  # the least recently touched entry
    store.put(SessionKey(b"a", 0, 5), b"2")
    store.put(SessionKey(b"c", 7, 7), b"1")
    store.put(SessionKey(b"d", 8, 8), b"1")  # over the budget: the removal is evicted
    assert [(r.key, r.value) for r in changelog.records[1:]] == [
        (session_key_to_bytes(SessionKey(b"a", 0, 5)), b"2"), (session_key_to_bytes(SessionKey(b"a", 0, 0)), None)]
    assert list(store._dirty) == [SessionKey(b"c", 7, 7), SessionKey(b"d", 8, 8)]


def test_a_session_written_early_for_its_removal_hides_no_other_removal():
    """The sessions written before a removal move the store's stream time: every removal's
    old value is read before the flush writes anything, or a later removal of another key
    would find its session expired and retract nothing."""
    clock = Clock()
    changelog = ListChangelogWriter()
    inner = ChangeloggingSessionStore(InMemorySessionStore(100, "s"), changelog, clock.timestamp)
    store = CachingSessionStore(inner, 1 << 20, record_timestamp=clock.timestamp,
                                set_record_timestamp=clock.set_override)
    flushed = []
    store.set_flush_listener(lambda session, new, old: flushed.append((session, new, old)))
    store.put(SessionKey(b"a", 0, 0), b"1")
    store.put(SessionKey(b"b", 0, 10), b"1")
    store.flush_cache()
    store.remove(SessionKey(b"a", 0, 0))
    store.remove(SessionKey(b"b", 0, 10))
    store.put(SessionKey(b"b", 0, 20), b"2")
    clock.now = 200
    store.put(SessionKey(b"a", 0, 200), b"2")  # written before a's removal: the store's time is 200
    store.flush_cache()
    assert [(r.key, r.value) for r in changelog.records[2:]] == [
        (session_key_to_bytes(SessionKey(b"a", 0, 200)), b"2"), (session_key_to_bytes(SessionKey(b"a", 0, 0)), None),
        (session_key_to_bytes(SessionKey(b"b", 0, 20)), b"2"), (session_key_to_bytes(SessionKey(b"b", 0, 10)), None)]
    assert (SessionKey(b"b", 0, 10), None, b"1") in flushed
