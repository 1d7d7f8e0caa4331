"""Throughput of the RocksDB state stores (issue 3 floors).

Run: .venv/bin/python bench/stores.py [--scale 1.0]
Prints one line per figure, then, as its last line, one JSON object of ops/s.
Each write figure runs on a fresh store in a temporary directory; stores are the
plain RocksDB stores (the changelogging wrapper's cost is reported separately as
``*_logged`` extras, not floors). The machine is shared, so every figure is the
best of ``--repeat`` runs (as timeit reports the minimum time).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from airflow_stateful_provider.streams.state import (
    ChangeloggingKeyValueStore,
    ChangelogRecord,
    RocksDBKeyValueStore,
    RocksDBSessionStore,
    RocksDBVersionedKeyValueStore,
    SessionKey,
)

FLOORS = {
    "kv_put": 150_000,
    "kv_get": 300_000,
    "session_step": 60_000,
    "session_read_after_segment_crossing": 100_000,
    "session_close_scan_while_growing": 20_000,
    "versioned_put_in_order": 100_000,
    "versioned_put_10pct_out_of_order": 60_000,
    "versioned_get_as_of": 100_000,
    "kv_restore_apply": 300_000,
}
_I64 = struct.Struct(">q")


class _NullWriter:
    def send(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        pass


REPEAT = 3


def _timed(n: int, fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return n / (time.perf_counter() - started)


def _best(results: dict[str, float], name: str, value: float) -> None:
    results[name] = max(results.get(name, 0.0), value)


def bench_kv(root: str, n: int, results: dict[str, float]) -> None:
    rng = random.Random(1)
    keys = [b"user-%010d" % rng.randrange(10**9) for _ in range(n)]
    value = bytes(100)
    shuffled = keys[:]
    rng.shuffle(shuffled)
    for rep in range(REPEAT):
        store = RocksDBKeyValueStore(os.path.join(root, f"kv-{rep}"))
        put = store.put

        def puts() -> None:
            for key in keys:
                put(key, value)

        _best(results, "kv_put", _timed(n, puts))
        get = store.get

        def gets() -> None:
            for key in shuffled:
                get(key)

        _best(results, "kv_get", _timed(n, gets))
        logged = ChangeloggingKeyValueStore(store, _NullWriter(), timestamp_fn=lambda: 0)
        lput = logged.put

        def logged_puts() -> None:
            for key in keys:
                lput(key, value)

        _best(results, "kv_put_logged", _timed(n, logged_puts))
        store.close()


def bench_kv_restore(root: str, n: int, results: dict[str, float]) -> None:
    value = bytes(100)
    batch_size = 1000
    batches = [
        [ChangelogRecord(b"user-%010d" % (i + j), value if (i + j) % 10 else None, i + j, i + j)
         for j in range(batch_size)]
        for i in range(0, n, batch_size)
    ]
    for rep in range(REPEAT):
        store = RocksDBKeyValueStore(os.path.join(root, f"kv-restore-{rep}"))
        restore = store.restore_batch

        def apply() -> None:
            for batch in batches:
                restore(batch)

        _best(results, "kv_restore_apply", _timed(len(batches) * batch_size, apply))
        store.close()


def bench_session(root: str, n: int, results: dict[str, float]) -> None:
    """find_sessions + merge + put per record, 10k keys, most records extend a session."""
    gap = 300_000
    keys = [b"user-%05d" % i for i in range(10_000)]
    rng = random.Random(2)
    # event time advances 20 ms per record: a key recurs every ~200 s < gap, so most
    # records extend its session; 2% jump far ahead of their session to start a new one
    records = []
    ts = 0
    for _ in range(n):
        ts += 20
        records.append((rng.choice(keys), ts))
    pack = _I64.pack
    unpack = _I64.unpack
    for rep in range(REPEAT):
        store = RocksDBSessionStore(os.path.join(root, f"session-{rep}"), gap)
        find = store.find_sessions
        put = store.put
        remove = store.remove

        def steps() -> None:
            for key, t in records:
                start = end = t
                count = 1
                for session, agg in find(key, t - gap, t + gap):
                    if session.start < start:
                        start = session.start
                    if session.end > end:
                        end = session.end
                    count += unpack(agg)[0]
                    if session.start != t or session.end != t:
                        remove(session)
                put(SessionKey(key, start, end), pack(count))

        _best(results, "session_step", _timed(n, steps))
        store.close()


def bench_session_segment_crossing(root: str, n: int, results: dict[str, float]) -> None:
    """find_sessions just after the session of each of 10k keys grew into the next segment:
    the segment before is then all deleted rows, which an unbounded seek walks through to the
    next live row (4.9k reads/s before the reads were bounded; docs/benchmarks.md, "Latency")."""
    gap = 30_000  # a segment interval of 60 s
    keys = [b"user-%05d" % i for i in range(10_000)]
    reads = [keys[i % len(keys)] for i in range(n)]
    for rep in range(REPEAT):
        store = RocksDBSessionStore(os.path.join(root, f"crossing-{rep}"), gap)
        boundary = store.segment_interval_ms
        for key in keys:
            store.put(SessionKey(key, boundary - 10_000, boundary - 1_000), b"1")
        for key in keys:
            store.remove(SessionKey(key, boundary - 10_000, boundary - 1_000))
            store.put(SessionKey(key, boundary - 10_000, boundary + 1_000), b"1")
        find, now = store.find_sessions, boundary + 1_000

        def read() -> None:
            for key in reads:
                find(key, now - gap, now + gap)

        _best(results, "session_read_after_segment_crossing", _timed(n, read))
        store.close()


def bench_session_close_scan(root: str, n: int, results: dict[str, float]) -> None:
    """find_sessions_by_end (emit on window close) over a window of closed sessions, while the
    open sessions of 1,000 keys have each grown 20 times: every growth deletes the index row
    of the session's previous end, so the index past the window is deleted rows, which an
    unbounded scan walked through to the next live row (1,150 scans/s before the scan was
    bounded; docs/stores.md, "Performance")."""
    keys = [b"user-%05d" % i for i in range(1_000)]
    for rep in range(REPEAT):
        store = RocksDBSessionStore(os.path.join(root, f"close-scan-{rep}"), 30_000, time_index=True)
        for key in keys:
            store.put(SessionKey(key, 79_000, 80_000), b"1")  # closed
        for growth in range(20):
            for key in keys:
                if growth:
                    store.remove(SessionKey(key, 100_000, 100_000 + 10 * (growth - 1)))
                store.put(SessionKey(key, 100_000, 100_000 + 10 * growth), b"1")
        scan = store.find_sessions_by_end

        def scans() -> None:
            for i in range(n):  # advances past the closed sessions: nothing to emit
                scan(81_000 + i, 81_000 + i)

        _best(results, "session_close_scan_while_growing", _timed(n, scans))
        store.close()


def bench_versioned(root: str, n: int, results: dict[str, float]) -> None:
    hr = 300_000
    keys = [b"sym-%05d" % i for i in range(10_000)]
    rng = random.Random(3)
    value = bytes(50)

    ordered = [(rng.choice(keys), 10 * (i + 1)) for i in range(n)]
    last = ordered[-1][1]
    # as-of lookups spread over the history retention window
    queries = [(rng.choice(keys), last - rng.randrange(hr)) for _ in range(n)]
    mixed = []
    for i in range(n):
        t = 10 * (i + 1)
        if rng.random() < 0.1:
            t = max(0, t - rng.randrange(hr // 2))
        mixed.append((rng.choice(keys), t))
    for rep in range(REPEAT):
        store = RocksDBVersionedKeyValueStore(os.path.join(root, f"versioned-in-order-{rep}"), hr)
        put = store.put

        def puts_in_order() -> None:
            for key, t in ordered:
                put(key, value, t)

        _best(results, "versioned_put_in_order", _timed(n, puts_in_order))
        get = store.get

        def gets_as_of() -> None:
            for key, t in queries:
                get(key, t)

        _best(results, "versioned_get_as_of", _timed(n, gets_as_of))
        store.close()

        store = RocksDBVersionedKeyValueStore(os.path.join(root, f"versioned-ooo-{rep}"), hr)
        put = store.put

        def puts_mixed() -> None:
            for key, t in mixed:
                put(key, value, t)

        _best(results, "versioned_put_10pct_out_of_order", _timed(n, puts_mixed))
        store.close()


def main(argv: list[str] | None = None) -> int:
    global REPEAT
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply operation counts")
    parser.add_argument("--repeat", type=int, default=REPEAT, help="runs per figure (best is reported)")
    args = parser.parse_args(argv)
    REPEAT = max(1, args.repeat)
    n = max(1000, int(200_000 * args.scale))
    root = tempfile.mkdtemp(prefix="bench-stores-")
    results: dict[str, float] = {}
    try:
        bench_kv(root, n, results)
        bench_kv_restore(root, int(n * 2.5), results)
        bench_session(root, n, results)
        bench_session_segment_crossing(root, n // 4, results)
        bench_session_close_scan(root, n // 20, results)
        bench_versioned(root, n, results)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for name, value in results.items():
        floor = FLOORS.get(name)
        verdict = "" if floor is None else ("ok" if value >= floor else f"BELOW floor {floor:,}")
        print(f"{name:36s} {value:>12,.0f} ops/s  {verdict}")
    print(json.dumps({name: round(value) for name, value in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
