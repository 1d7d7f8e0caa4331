"""Exactly-once state stores: the three RocksDB stores with ``transactional=True`` through
commit, abort, reopen and kill -9, and the no-op transaction members of the other stores."""

from __future__ import annotations

from pathlib import Path

import pytest
import rocksdict

from airflow_stateful_provider.streams.errors import ConfigError, IllegalStateError
from airflow_stateful_provider.streams.state import (
    ChangelogRecord,
    InMemoryKeyValueStore,
    InMemorySessionStore,
    InMemoryVersionedKeyValueStore,
    RocksDBKeyValueStore,
    RocksDBSessionStore,
    RocksDBVersionedKeyValueStore,
    SessionKey,
)

from .test_transaction_buffer import run_killed


def _open_kv(path: str, transactional: bool = True) -> RocksDBKeyValueStore:
    return RocksDBKeyValueStore(path, transactional=transactional)


def _write_kv(store: RocksDBKeyValueStore, rnd: int) -> None:
    for i in range(20):
        store.put(b"k%02d" % ((i * 7 + rnd * 3) % 30), b"r%d-%d" % (rnd, i))
    store.put_all([(b"k%02d" % ((rnd * 5 + 1) % 30), None), (b"batch%d" % rnd, b"b")])
    store.delete(b"k%02d" % ((rnd * 11) % 30))


def _snap_kv(store: RocksDBKeyValueStore) -> object:
    return list(store.all())


def _open_session(path: str, transactional: bool = True) -> RocksDBSessionStore:
    return RocksDBSessionStore(path, 100_000, transactional=transactional)


def _write_session(store: RocksDBSessionStore, rnd: int) -> None:
    # rounds 200 s apart with retention 100 s: each round expires the segments of the one before
    for i in range(15):
        end = rnd * 200_000 + i * 3_000 + 1_000
        store.put(SessionKey(b"s%d" % (i % 4), end - 500, end), b"agg%d-%d" % (rnd, i))
    store.remove(SessionKey(b"s1", rnd * 200_000 + 3_500, rnd * 200_000 + 4_000))


def _snap_session(store: RocksDBSessionStore) -> object:
    return store.observed_stream_time, store.all()


def _open_indexed_session(path: str, transactional: bool = True) -> RocksDBSessionStore:
    return RocksDBSessionStore(path, 100_000, transactional=transactional, time_index=True)


def _snap_indexed_session(store: RocksDBSessionStore) -> object:
    """The time index answers too: its rows are buffered, committed and dropped with the sessions'."""
    return store.observed_stream_time, store.all(), store.find_sessions_by_end(0, 1 << 62)


def _open_versioned(path: str, transactional: bool = True) -> RocksDBVersionedKeyValueStore:
    return RocksDBVersionedKeyValueStore(path, 300_000, segment_interval=100_000, transactional=transactional)


def _write_versioned(store: RocksDBVersionedKeyValueStore, rnd: int) -> None:
    for i in range(15):
        value = None if i % 6 == 5 else b"v%d-%d" % (rnd, i)
        store.put(b"v%d" % (i % 5), value, rnd * 200_000 + i * 20_000)
    store.put(b"v0", b"late", rnd * 200_000 + 10_000)  # out of order


def _snap_versioned(store: RocksDBVersionedKeyValueStore) -> object:
    return store.observed_stream_time, {k: store.get_versions(k) for k in (b"v%d" % i for i in range(5))}


KINDS = {
    "kv": (_open_kv, _write_kv, _snap_kv),
    "session": (_open_session, _write_session, _snap_session),
    "indexed-session": (_open_indexed_session, _write_session, _snap_indexed_session),
    "versioned": (_open_versioned, _write_versioned, _snap_versioned),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request):
    return KINDS[request.param]


def test_writes_are_visible_before_commit_and_reach_rocksdb_only_with_it(tmp_path, kind):
    open_, write, snap = kind
    store = open_(str(tmp_path / "s"))
    try:
        empty = snap(store)
        created = dict(store._txn._db.items())  # nothing, or the time index's marker row
        write(store, 0)
        store.flush()  # a transactional flush does not write the buffer to RocksDB
        assert snap(store) != empty
        assert store.uncommitted_bytes > 0
        assert dict(store._txn._db.items()) == created
        expected = snap(store)
        assert store.commit_transaction() > 0
        assert store.uncommitted_bytes == 0 and store.commit_transaction() == 0
        assert snap(store) == expected
        assert dict(store._txn._db.items()) != created
    finally:
        store.close()
    store = open_(str(tmp_path / "s"))
    try:
        assert snap(store) == expected
    finally:
        store.close()


def test_abort_and_reopen_give_the_last_commit(tmp_path, kind):
    open_, write, snap = kind
    path = str(tmp_path / "s")
    store = open_(path)
    try:
        write(store, 0)
        write(store, 1)
        store.commit_transaction()
        committed = snap(store)
        write(store, 2)  # expires round 0 and 1 segments: buffered range deletes
        write(store, 3)
        assert snap(store) != committed
        store.abort_transaction()
        assert snap(store) == committed  # the in-memory state is reloaded too
        write(store, 4)
        store.flush()
    finally:
        store.close()  # drops round 4: a close never commits
    store = open_(path)
    try:
        assert snap(store) == committed
        write(store, 2)
        store.commit_transaction()
        after_second_commit = snap(store)
    finally:
        store.close()
    store = open_(path)
    try:
        assert snap(store) == after_second_commit
    finally:
        store.close()


_CRASH_SCRIPT = """
import os, signal, sys
from tests.unit.streams.state.common.test_transactional_stores import KINDS, _open_kv
kind, path, out = sys.argv[1:]
open_, write, snap = KINDS[kind]
store = open_(path)
write(store, 0)
store.commit_transaction()
write(store, 1)
store.commit_transaction()
with open(out, "w") as f:
    f.write(repr(snap(store)))
write(store, 2)
store.flush()
plain = _open_kv(path + "-plain", transactional=False)
plain.put(b"unflushed", b"lost")
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("name", sorted(KINDS))
def test_commit_survives_kill_9_and_uncommitted_writes_do_not(tmp_path, name):
    open_, _write, snap = KINDS[name]
    path, out = str(tmp_path / "s"), str(tmp_path / "committed.txt")
    run_killed(_CRASH_SCRIPT, name, path, out)
    store = open_(path)
    try:
        assert repr(snap(store)) == Path(out).read_text()
    finally:
        store.close()
    plain = _open_kv(path + "-plain", transactional=False)
    try:  # the control: without the WAL an unflushed write dies with the process
        assert plain.get(b"unflushed") is None
    finally:
        plain.close()


_RESTORE_CRASH_SCRIPT = """
import os, signal, sys
from tests.unit.streams.state.common.test_transactional_stores import ChangelogRecord, _open_kv
store = _open_kv(sys.argv[1])
store.restore_batch([ChangelogRecord(b"restored", b"1", 0, 0)])
store.put(b"on-top", b"2")
store.commit_transaction()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_restored_rows_survive_kill_9_with_the_commits_on_top_of_them(tmp_path):
    path = str(tmp_path / "s")
    run_killed(_RESTORE_CRASH_SCRIPT, path)
    store = _open_kv(path)
    try:
        assert list(store.all()) == [(b"on-top", b"2"), (b"restored", b"1")]
    finally:
        store.close()


def test_restore_goes_straight_to_rocksdb_and_needs_an_empty_buffer(tmp_path):
    store = _open_kv(str(tmp_path / "s"))
    try:
        assert store.restore_batch([ChangelogRecord(b"a", b"1", 0, 0)]) == 1
        assert store._txn._db.get(b"a") == b"1" and store.uncommitted_bytes == 0
        with store.restoring():
            store.put(b"b", b"2")
        assert store._txn._db.get(b"b") == b"2"
        store.put(b"c", b"3")
        with pytest.raises(IllegalStateError, match=str(tmp_path / "s")):
            store.restore_batch([ChangelogRecord(b"d", b"4", 0, 1)])
        with pytest.raises(IllegalStateError, match="uncommitted"):
            store.restoring().__enter__()
        with pytest.raises(IllegalStateError, match=str(tmp_path / "s")):
            store._db.write(rocksdict.WriteBatch(raw_mode=True))
    finally:
        store.close()


def test_session_restore_persists_observed_time_directly(tmp_path):
    path = str(tmp_path / "s")
    store = _open_session(path)
    key = SessionKey(b"k", 250_000, 300_000)
    try:
        store.restore_batch([ChangelogRecord(key.key + (300_000).to_bytes(8, "big") + (250_000).to_bytes(8, "big"),
                                             b"agg", 0, 0)])
        assert store.uncommitted_bytes == 0
    finally:
        store.close()
    store = _open_session(path)
    try:
        assert store.observed_stream_time == 300_000
        assert store.fetch_session(b"k", 250_000, 300_000) == b"agg"
    finally:
        store.close()


def test_put_all_of_a_transactional_store_is_buffered_and_all_or_nothing(tmp_path):
    store = _open_kv(str(tmp_path / "s"))
    try:
        store.put_all([(b"a", b"1"), (b"b", b"2")])
        assert store.get(b"a") == b"1" and store._txn._db.get(b"a") is None
        with pytest.raises(Exception, match="must be bytes"):
            store.put_all([(b"c", b"3"), (b"d", 4)])
        assert store.get(b"c") is None
    finally:
        store.close()


def test_read_only_store_cannot_be_transactional(tmp_path):
    _open_kv(str(tmp_path / "s")).close()
    with pytest.raises(ConfigError, match="read-only"):
        RocksDBKeyValueStore(tmp_path / "s", read_only=True, transactional=True)


def test_non_transactional_and_in_memory_stores_answer_alike(tmp_path):
    stores = [
        _open_kv(str(tmp_path / "kv"), transactional=False),
        _open_session(str(tmp_path / "session"), transactional=False),
        _open_versioned(str(tmp_path / "versioned"), transactional=False),
        InMemoryKeyValueStore(),
        InMemorySessionStore(100_000),
        InMemoryVersionedKeyValueStore(300_000),
    ]
    for store in stores:
        assert store.transactional is False
        assert store.commit_transaction() == 0
        store.abort_transaction()
        assert store.uncommitted_bytes == 0
        with store.restoring():
            pass
        store.close()
