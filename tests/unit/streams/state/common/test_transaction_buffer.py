"""The TransactionBuffer (exactly-once state stores) against a model on a real RocksDB, and its
commit surviving a kill -9."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import rocksdict
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from airflow_stateful_provider.streams.errors import IllegalStateError
from airflow_stateful_provider.streams.state.common.transaction_buffer import ENTRY_OVERHEAD, TransactionBuffer

REPO_ROOT = Path(__file__).resolve().parents[5]


def run_killed(script: str, *args: str) -> None:
    """Run ``script`` in a fresh interpreter that is expected to end by SIGKILL-ing itself."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-c", script, *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr

# -- the buffer against a model ----------------------------------------------------------------

KEYS = st.builds(bytes, st.lists(st.sampled_from([0x00, 0x61, 0x62, 0xFF]), max_size=3))
VALUES = st.binary(max_size=4)
STARTS = st.one_of(
    st.tuples(st.sampled_from(["seek", "seek_for_prev"]), KEYS),
    st.tuples(st.sampled_from(["seek_to_first", "seek_to_last"])),
)
MOVES = st.lists(st.sampled_from(["next", "prev"]), max_size=10)


def _open_raw(path: str) -> rocksdict.Rdict:
    db = rocksdict.Rdict(path, rocksdict.Options(raw_mode=True))
    wo = rocksdict.WriteOptions()
    wo.disable_wal = True  # like the stores: the commit must turn the WAL on by itself
    db.set_write_options(wo)
    return db


class BufferModel:
    """Committed dict, pending writes (None = deleted) and unmerged range tombstones."""

    def __init__(self) -> None:
        self.base: dict[bytes, bytes] = {}
        self.pending: dict[bytes, bytes | None] = {}
        self.ranges: list[tuple[bytes, bytes]] = []

    def get(self, key: bytes) -> bytes | None:
        if key in self.pending:
            return self.pending[key]
        if any(b <= key < e for b, e in self.ranges):
            return None
        return self.base.get(key)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        if begin < end:  # an empty range changes nothing
            self.pending = {k: v for k, v in self.pending.items() if not begin <= k < end}
            self.ranges.append((begin, end))

    def view(self) -> dict[bytes, bytes]:
        found = {k: self.get(k) for k in set(self.base) | set(self.pending)}
        return {k: v for k, v in found.items() if v is not None}

    def commit(self) -> None:
        self.base = self.view()
        self.discard()

    def discard(self) -> None:
        self.pending, self.ranges = {}, []


class BufferMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="txn-buffer-")
        self.db = _open_raw(self.dir)
        self.buf = TransactionBuffer(self.db)
        self.model = BufferModel()

    def teardown(self) -> None:
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(key=KEYS, value=VALUES)
    def put(self, key: bytes, value: bytes) -> None:
        self.buf.put(key, value)
        self.model.pending[key] = value

    @rule(key=KEYS)
    def delete(self, key: bytes) -> None:
        self.buf.delete(key)
        self.model.pending[key] = None

    @rule(begin=KEYS, end=KEYS)
    def delete_range(self, begin: bytes, end: bytes) -> None:
        if end < begin:
            with pytest.raises(ValueError, match="comes before begin"):
                self.buf.delete_range(begin, end)
            return
        self.buf.delete_range(begin, end)
        self.model.delete_range(begin, end)

    @rule(key=KEYS)
    def get(self, key: bytes) -> None:
        assert self.buf.get(key) == self.model.get(key)

    @rule()
    def commit(self) -> None:
        size = len(self.buf)
        assert len(self.model.pending) <= self.buf.commit() == size <= len(self.model.pending) + len(self.model.ranges)
        self.model.commit()

    @rule()
    def discard(self) -> None:
        self.buf.discard()
        self.model.discard()

    @rule(key=KEYS, value=st.one_of(st.none(), VALUES))
    def direct_write(self, key: bytes, value: bytes | None) -> None:
        if not self.buf.is_empty:
            with pytest.raises(IllegalStateError, match=self.dir):
                with self.buf.direct():
                    pass
            return
        with self.buf.direct():
            if value is None:
                self.buf.delete(key)
                self.model.base.pop(key, None)
            else:
                self.buf.put(key, value)
                self.model.base[key] = value
            assert self.buf.is_empty

    @rule(start=STARTS, moves=MOVES)
    def scan(self, start: tuple, moves: list[str]) -> None:
        view = self.model.view()
        keys = sorted(view)
        it = self.buf.iter()
        getattr(it, start[0])(*start[1:])
        if start[0] == "seek":
            pos = next((i for i, k in enumerate(keys) if k >= start[1]), len(keys))
        elif start[0] == "seek_for_prev":
            pos = max((i for i, k in enumerate(keys) if k <= start[1]), default=-1)
        else:
            pos = 0 if start[0] == "seek_to_first" else len(keys) - 1
        for move in [None, *moves]:
            if move is not None:
                getattr(it, move)()
                pos += 1 if move == "next" else -1
            expected_valid = 0 <= pos < len(keys)
            assert it.valid() == expected_valid, (start, moves, move)
            if not expected_valid:
                break
            assert (it.key(), it.value()) == (keys[pos], view[keys[pos]])

    @invariant()
    def rocksdb_holds_only_committed_data(self) -> None:
        assert dict(self.db.items()) == self.model.base

    @invariant()
    def sizes(self) -> None:
        model = self.model
        assert self.buf.is_empty == (not model.pending and not model.ranges)
        entry_bytes = sum(len(k) + len(v or b"") + ENTRY_OVERHEAD for k, v in model.pending.items())
        if not model.ranges:
            assert len(self.buf) == len(model.pending)
            assert self.buf.pending_bytes == entry_bytes
        else:
            assert self.buf.pending_bytes > entry_bytes


BufferMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestBufferAgainstModel = BufferMachine.TestCase


def test_empty_buffer_hands_out_the_rocksdb_iterator(tmp_path):
    db = _open_raw(str(tmp_path))
    try:
        buf = TransactionBuffer(db)
        assert type(buf.iter()) is rocksdict.RdictIter
        buf.put(b"k", b"v")
        assert type(buf.iter()) is not rocksdict.RdictIter
        buf.discard()
        assert type(buf.iter()) is rocksdict.RdictIter
    finally:
        db.close()


def test_iterator_follows_writes_made_while_it_is_open(tmp_path):
    db = _open_raw(str(tmp_path))
    try:
        for key in (b"a", b"c", b"e"):
            db.put(key, key)
        buf = TransactionBuffer(db)
        buf.put(b"b", b"B")
        it = buf.iter()
        it.seek_to_first()
        assert it.key() == b"a"
        buf.put(b"a2", b"A2")
        buf.delete_range(b"c", b"d")
        it.next()
        assert (it.key(), it.value()) == (b"a2", b"A2")
        it.next()
        it.next()
        assert it.key() == b"e"
        it.next()
        assert not it.valid()
        it.next()  # a no-op, where RdictIter.next() on an invalid iterator crashes the process
        assert not it.valid()
    finally:
        db.close()


def test_flush_and_other_rdict_methods_reach_the_base_db_only(tmp_path):
    db = _open_raw(str(tmp_path))
    try:
        buf = TransactionBuffer(db)
        buf.put(b"k", b"v")
        buf.flush(True)
        assert db.get(b"k") is None and buf.get(b"k") == b"v"
        assert buf.property_int_value("rocksdb.estimate-num-keys") == 0
    finally:
        db.close()


def test_write_and_direct_with_buffered_writes_name_the_store(tmp_path):
    db = _open_raw(str(tmp_path))
    try:
        buf = TransactionBuffer(db, path="/stores/0_1/counts")
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.put(b"x", b"1")
        buf.delete_range(b"a", b"b")
        with pytest.raises(IllegalStateError, match="/stores/0_1/counts.*1 uncommitted"):
            buf.write(batch)
        with pytest.raises(IllegalStateError, match="/stores/0_1/counts"):
            with buf.direct():
                pass
        buf.discard()
        buf.write(batch)
        assert db.get(b"x") == b"1"
    finally:
        db.close()


_RAW_CRASH_SCRIPT = """
import os, signal, sys
from tests.unit.streams.state.common.test_transaction_buffer import TransactionBuffer, _open_raw
buf = TransactionBuffer(_open_raw(sys.argv[1]))
buf.put(b"committed", b"1")
buf.delete_range(b"a", b"b")
assert buf.commit() == 2
buf.put(b"uncommitted", b"2")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_buffer_commit_is_logged_even_when_the_db_skips_the_wal(tmp_path):
    db = _open_raw(str(tmp_path))
    db.put(b"aa", b"flushed")
    db.flush(True)
    db.close()
    run_killed(_RAW_CRASH_SCRIPT, str(tmp_path))
    db = _open_raw(str(tmp_path))
    try:
        assert dict(db.items()) == {b"committed": b"1"}
    finally:
        db.close()
