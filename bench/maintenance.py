"""A month of simulated traffic with and without the daily maintenance (issue 34).

Run: .venv/bin/python -m bench.maintenance [--keys 50000] [--days 30] [--json out.json]

A table of ``--keys`` live keys over 5 partitions (one RocksDB store each, as 5 tasks hold
them), every live key updated once a simulated day. Each week a fifth of the live keys go
quiet for good and as many new keys take their place (churn), and partition 4 stalls
entirely on day 10 (no record reaches it again: its stream time stops). Three set-ups:

- ``no-ttl``: a plain key-value table, what an application without a time to live has;
- ``ttl``: ``Materialized.with_time_to_live(3 days)``, expiry by stream time only;
- ``ttl+maintenance``: the same plus the daily ``store_maintenance`` DAG's operations at the end
  of every simulated day: ``enforce_retention(now)`` (expires the stalled partition by the
  clock) then ``compact()``.

Per simulated day it records the stores' data files (RocksDB's live SST files) and the changelog's bytes as a
compacted topic keeps them (the newest record per key; tombstones for a day, Kafka's
``delete.retention.ms``; a record counted as key + value + 70 bytes of record overhead). After
the month it restores each changelog into a fresh store and times it against restoring a
changelog of the live keys only (a store that never held the dropped data). The last line is
one JSON object; docs/pictures/maintenance_bench.py draws it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path: as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from airflow_stateful_provider.streams.state import ChangeloggingKeyValueStore, ChangelogRecord, RocksDBKeyValueStore
from airflow_stateful_provider.streams.state.keyvalue.ttl import TimeToLiveKeyValueStore

DAY = 86_400_000
TTL = 3 * DAY
PARTITIONS = 5
STALLED_PARTITION, STALL_DAY = 4, 10
RECORD_OVERHEAD = 70
TOMBSTONE_KEPT = DAY  # delete.retention.ms
SETUPS = ("no-ttl", "ttl", "ttl+maintenance")
START = 1_700_000_000_000
VALUE_BYTES = 100


class CompactedLog:
    """What a compacted changelog partition keeps: the newest record per key, tombstones
    for a day after they were written."""

    def __init__(self) -> None:
        self.latest: dict[bytes, tuple[bytes | None, int]] = {}

    def send(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        self.latest[key] = (value, timestamp)

    def clean(self, now: int) -> None:
        for key in [k for k, (v, ts) in self.latest.items() if v is None and ts < now - TOMBSTONE_KEPT]:
            del self.latest[key]

    def size(self) -> int:
        return sum(len(k) + (len(v) if v is not None else 0) + RECORD_OVERHEAD for k, (v, _) in self.latest.items())

    def records(self) -> list[ChangelogRecord]:
        return [ChangelogRecord(k, v, ts, i) for i, (k, (v, ts)) in enumerate(self.latest.items())]


class Partition:
    def __init__(self, root: str, setup: str, index: int, clock: list[int]) -> None:
        self.raw = RocksDBKeyValueStore(os.path.join(root, f"p{index}"), name="profiles")
        self.log = CompactedLog()
        logged = ChangeloggingKeyValueStore(self.raw, self.log, lambda: clock[0])
        self.store = logged if setup == "no-ttl" else TimeToLiveKeyValueStore(logged, TTL, lambda: clock[0])


def keyspace(keys: int, days: int, seed: int = 7) -> list[set[bytes]]:
    """The live keys of every day: a fifth replaced by new ones at the start of each week."""
    rng = random.Random(seed)
    live = [f"user-{i:08d}".encode() for i in range(keys)]
    next_id = keys
    per_day = []
    for day in range(days):
        if day and day % 7 == 0:
            quiet = set(rng.sample(range(len(live)), len(live) // 5))
            live = [k for i, k in enumerate(live) if i not in quiet]
            live += [f"user-{next_id + i:08d}".encode() for i in range(len(quiet))]
            next_id += len(quiet)
        per_day.append(set(live))
    return per_day


def partition_of(key: bytes) -> int:
    return int(key[5:]) % PARTITIONS


def run(setup: str, days_keys: list[set[bytes]], root: str) -> dict:
    clock = [START]
    parts = [Partition(os.path.join(root, setup), setup, p, clock) for p in range(PARTITIONS)]
    rng = random.Random(11)
    daily = []
    for day, live in enumerate(days_keys):
        for key in sorted(live):
            p = partition_of(key)
            if p == STALLED_PARTITION and day >= STALL_DAY:
                continue
            clock[0] = START + day * DAY + (int(key[5:]) % 1000) * 60_000
            parts[p].store.put(key, rng.randbytes(VALUE_BYTES))  # incompressible, as real profiles mostly are
        end_of_day = START + (day + 1) * DAY
        if setup == "ttl+maintenance":
            for part in parts:
                part.store.enforce_retention(end_of_day)
                part.raw.compact()
        for part in parts:
            part.raw.flush()
            part.log.clean(end_of_day)
        daily.append({"day": day + 1, "store_bytes": sum(sst_bytes(p.raw) for p in parts),
                      "changelog_bytes": sum(p.log.size() for p in parts),
                      "rows": sum(sum(1 for _ in p.raw.all()) for p in parts)})
        print(f"{setup:16} day {day + 1:2}: store {daily[-1]['store_bytes'] / 1e6:7.1f} MB, changelog "
              f"{daily[-1]['changelog_bytes'] / 1e6:7.1f} MB, {daily[-1]['rows']:,} rows", file=sys.stderr)
    restore_s = restore_seconds([p.log.records() for p in parts], os.path.join(root, f"{setup}-restore"))
    for part in parts:
        part.raw.close()
    return {"setup": setup, "daily": daily, "restore_s": restore_s,
            "changelog_records": sum(len(p.log.latest) for p in parts)}


def sst_bytes(store: RocksDBKeyValueStore) -> int:
    """The store's data files (RocksDB's live SST files), without its logs and manifests,
    whose fixed size would hide the data at small scales."""
    return store._rocksdb_int("rocksdb.live-sst-files-size")


def restore_seconds(logs: list[list[ChangelogRecord]], root: str, repeat: int = 3) -> float:
    """The best of ``repeat`` restores of every partition into fresh stores (the machine is
    shared: the minimum is the least disturbed run)."""
    best = float("inf")
    for run_index in range(repeat):
        began = time.perf_counter()
        for i, records in enumerate(logs):
            store = RocksDBKeyValueStore(os.path.join(root, f"r{run_index}", f"p{i}"), name="profiles")
            for at in range(0, len(records), 10_000):
                store.restore_batch(records[at:at + 10_000])
            store.flush()
            store.close()
        best = min(best, time.perf_counter() - began)
    return best


def live_only(days_keys: list[set[bytes]], root: str) -> dict:
    """The baseline: a store that holds exactly the keys updated within the TTL at the end."""
    last_day = len(days_keys) - 1
    recent = set().union(*days_keys[max(0, last_day - 2):])
    keys = [k for k in sorted(recent) if not (partition_of(k) == STALLED_PARTITION and last_day >= STALL_DAY)]
    rng = random.Random(13)
    logs: list[list[ChangelogRecord]] = [[] for _ in range(PARTITIONS)]
    for key in keys:
        logs[partition_of(key)].append(ChangelogRecord(key, START.to_bytes(8, "big") + rng.randbytes(VALUE_BYTES),
                                                       START, 0))
    seconds = restore_seconds(logs, os.path.join(root, "live-restore"))
    size = 0
    for i in range(PARTITIONS):
        store = RocksDBKeyValueStore(os.path.join(root, "live-restore", "r0", f"p{i}"), name="profiles")
        store.flush()
        size += sst_bytes(store)
        store.close()
    return {"rows": len(keys), "store_bytes": size, "restore_s": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args(argv)
    days_keys = keyspace(args.keys, args.days)
    root = tempfile.mkdtemp(prefix="bench-maintenance-")
    try:
        runs = [run(setup, days_keys, root) for setup in SETUPS]
        baseline = live_only(days_keys, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"keys": args.keys, "days": args.days, "ttl_days": TTL // DAY, "partitions": PARTITIONS,
              "stalled": {"partition": STALLED_PARTITION, "from_day": STALL_DAY}, "runs": runs, "live": baseline}
    for r in runs:
        last = r["daily"][-1]
        print(f"{r['setup']:16} after {args.days} days: store {last['store_bytes'] / baseline['store_bytes']:.2f}x "
              f"the live data, restore {r['restore_s'] / baseline['restore_s']:.2f}x", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"keys": args.keys, "days": args.days, "live": baseline,
                      "final": {r["setup"]: {**r["daily"][-1], "restore_s": r["restore_s"]} for r in runs}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
