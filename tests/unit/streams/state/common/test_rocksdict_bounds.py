"""What the stores' range reads rely on in rocksdict's read options (common/rocks.py,
``RocksDBStore._iter_below``), checked against the installed rocksdict."""

from __future__ import annotations

import gc

import rocksdict

KEYS = [b"a", b"a\x00", b"ab", b"b", b"c"]


def _db(tmp_path) -> rocksdict.Rdict:
    db = rocksdict.Rdict(str(tmp_path / "db"), options=rocksdict.Options(raw_mode=True))
    for key in KEYS:
        db[key] = b"1"
    return db


def _forward(it) -> list[bytes]:
    keys = []
    it.seek_to_first()
    while it.valid():
        keys.append(it.key())
        it.next()
    return keys


def test_an_upper_bound_ends_the_iteration_before_it(tmp_path):
    db = _db(tmp_path)
    options = rocksdict.ReadOptions()
    options.set_iterate_upper_bound(b"ab\x00")
    it = db.iter(options)
    gc.collect()
    assert _forward(it) == [b"a", b"a\x00", b"ab"]
    del it
    db.close()


def test_a_lower_bound_acts_as_an_upper_one_so_backward_reads_stay_unbounded(tmp_path):
    """rocksdict 0.3.29's ``set_iterate_lower_bound`` sets the upper bound: a bounded backward
    read would miss every row (keyvalue/rocksdb.py, ``_backward``). Should this fail after an
    upgrade, bound the backward reads below too."""
    db = _db(tmp_path)
    options = rocksdict.ReadOptions()
    options.set_iterate_lower_bound(b"ab")
    it = db.iter(options)
    assert _forward(it) == [b"a", b"a\x00"]
    del it
    db.close()
