"""Cold restore of a 1M-key store with a 5M-record changelog: from the changelog alone,
and from a snapshot on shared storage (``file://``) plus the changelog tail.

    .venv/bin/python bench/snapshot_restore.py [--keys 1000000] [--records 5000000] [--tail 100000]

Starts its own broker and writes the changelog of the ``counts`` store
(bench.topologies:marked_counts) directly: ``--records`` records over ``--keys`` keys, one
partition, compacted but with a day of compaction lag (so all records are still there). The
snapshot holds the state as of ``--records - --tail`` records (written into a
store the way a commit leaves it, then snapshotted by the same SnapshotTaker the runtime
uses), so a restore from it replays the last ``--tail`` records. Each cold restore runs the
runtime's own path on an empty state directory, without a consumer group, through the restore
consumer a stream thread makes: the changelog reader's ``prepare_stores`` (local state, else a
snapshot, else nothing), the stores opening, and restoration to the end offset. Both restored
stores are compared entry by entry. Prints progress, the figures with CPU seconds (rusage of
this process: the broker is another process), and one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.kafka.batch_decoding import decode_batches_at_once
from airflow_stateful_provider.streams.kafka.clients import construct_client, prepare_consumer
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
from airflow_stateful_provider.streams.restoration.changelog_reader import ChangelogReader
from airflow_stateful_provider.streams.restoration.restore_consumer import restore_consumer_settings
from airflow_stateful_provider.streams.snapshots.loading import SnapshotLoader
from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
from airflow_stateful_provider.streams.snapshots.taking import SnapshotTaker
from airflow_stateful_provider.streams.state.store_dir import open_store
from airflow_stateful_provider.streams.task_id import TaskId
from bench.topologies import STORE, marked_counts
from tools.kafka.broker import LocalKafkaBroker

APP = "bench-snapshots"
TASK = TaskId(0, 0)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Progress:
    """One line per second: done/total, rate, ETA."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total = what, total
        self.started = self.last = time.monotonic()

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < 1.0:
            return
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        bar = "#" * int(30 * done / max(self.total, 1))
        print(f"\r{self.what}: [{bar:<30}] {done:,}/{self.total:,} {rate:,.0f}/s ETA {eta:,.0f}s ", end="",
              flush=True)

    def done(self, done: int) -> None:
        self.update(done, force=True)
        print(flush=True)


def key(i: int, keys: int) -> bytes:
    return b"key-%07d" % (i % keys)


def fill_changelog(bootstrap: str, topic: str, keys: int, records: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    # Compacted, as a key-value changelog is, but not yet: records younger than a day stay, so a
    # full replay reads all of them (what a busy changelog between two compactions holds).
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact",
                                                               "min.compaction.lag.ms": "86400000"})])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=50, batch_size=1 << 20)
    progress = Progress("writing the changelog", records)
    for i in range(records):
        producer.send(topic, key=key(i, keys), value=i.to_bytes(8, "big"), partition=0)
        if i % 50_000 == 0:
            progress.update(i)
    producer.flush()
    producer.close()
    progress.done(records)


def config(work: Path, name: str, snapshot_url: str | None, bootstrap: str) -> StreamsConfig:
    return StreamsConfig(application_id=APP, bootstrap_servers=bootstrap, state_dir=str(work / name),
                         snapshot_url=snapshot_url, app_configs={"input": "unused-in", "output": "unused-out"})


def take_snapshot(work: Path, url: str, bootstrap: str, keys: int, upto: int) -> float:
    """A store holding the state as of the first ``upto`` records, snapshotted; returns the
    seconds the local checkpoint took on the calling thread."""
    cfg = config(work, "snapshotter", url, bootstrap)
    stores = TaskStateManager(TASK, marked_counts(cfg), cfg, record_collector=RecordCollector(None, task_id=TASK))
    stores.initialize()
    raw = stores.raw_store(STORE)
    progress = Progress("building the snapshot's store", keys)
    last = {}
    for i in range(max(0, upto - keys), upto):  # the last write of each key below upto
        last[key(i, keys)] = i.to_bytes(8, "big")
    batch = list(last.items())
    for start in range(0, len(batch), 100_000):
        raw.put_all(batch[start:start + 100_000])
        progress.update(start)
    progress.done(len(batch))
    stores.checkpoint({stores.changelog_partitions()[STORE]: upto - 1}, force=True)
    taker = SnapshotTaker(SnapshotStorage(url), APP, "at_least_once", interval_ms=0, interval_commits=1, keep=2)
    started = time.perf_counter()
    taker.after_commit(TASK, stores.task_dir, stores.snapshot_stores())
    local = time.perf_counter() - started
    if not taker.wait_idle(600) or taker.uploaded != 1:
        raise SystemExit(f"snapshot upload failed ({taker.failed} failures)")
    taker.close()
    stores.close()
    return local


def cold_restore(work: Path, name: str, url: str | None, bootstrap: str, total: int) -> dict:
    cfg = config(work, name, url, bootstrap)
    loader = SnapshotLoader(SnapshotStorage(url), APP) if url else None
    # the restore consumer a stream thread makes: the engine's network client, its settings,
    # batches decoded in one pass
    settings = restore_consumer_settings(cfg.consumer_configs, cfg.exactly_once)
    consumer = construct_client(KafkaConsumer, {"bootstrap_servers": bootstrap, **settings})
    prepare_consumer(consumer)
    decode_batches_at_once(consumer)
    reader = ChangelogReader(consumer, snapshot_loader=loader)
    stores = TaskStateManager(TASK, marked_counts(cfg), cfg, record_collector=RecordCollector(None, task_id=TASK))
    progress = Progress(f"cold restore, {name}", total)
    cpu0, started = cpu_seconds(), time.perf_counter()
    source = reader.prepare_stores(TASK, stores)
    prepared = time.perf_counter() - started
    stores.initialize()
    done = reader.register(TASK, stores)
    while not done:
        done = TASK in reader.restore()
        progress.update(sum(s.position for s in reader.progress()))
    seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu0
    progress.done(total)
    stores.close()
    consumer.close()
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2), "source": source.source,
            "snapshot_load_seconds": round(prepared, 2) if source.source == "snapshot" else None,
            "changelog_records": source.changelog_records, "store_dir": str(Path(cfg.task_state_dir(TASK)) / STORE)}


def same_contents(a: str, b: str) -> bool:
    with open_store(a, read_only=True) as left, open_store(b, read_only=True) as right:
        return all(x == y for x, y in zip(left.all(), right.all(), strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--tail", type=int, default=100_000, help="changelog records after the snapshot")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-snapshots-"))
    url = f"file://{work / 'shared'}"
    try:
        with LocalKafkaBroker(work / "kafka") as broker:
            bootstrap = broker.bootstrap_servers
            fill_changelog(bootstrap, f"{APP}-{STORE}-changelog", args.keys, args.records)
            local_checkpoint = take_snapshot(work, url, bootstrap, args.keys, args.records - args.tail)
            snapshot_bytes = sum(f.stat().st_size for f in (work / "shared").rglob("*") if f.is_file())
            full = cold_restore(work, "changelog-only", None, bootstrap, args.records)
            snap = cold_restore(work, "with-snapshot", url, bootstrap, args.records)
            equal = same_contents(full.pop("store_dir"), snap.pop("store_dir"))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    speedup = full["seconds"] / snap["seconds"]
    print(f"changelog only: {full['changelog_records']:,} records in {full['seconds']:.1f} s "
          f"({full['changelog_records'] / full['seconds']:,.0f} records/s), {full['cpu_seconds']:.1f} CPU s")
    print(f"snapshot ({snapshot_bytes / 2**20:,.1f} MiB, loaded in {snap['snapshot_load_seconds']:.1f} s) + "
          f"{snap['changelog_records']:,} changelog records: {snap['seconds']:.1f} s, {snap['cpu_seconds']:.1f} CPU s")
    print(f"speed-up {speedup:.1f}x; restored stores identical: {equal}; local checkpoint on the stream thread "
          f"{local_checkpoint * 1000:.0f} ms (load average {os.getloadavg()[0]:.1f}: wall-clock figures move with it)")
    print(json.dumps({"keys": args.keys, "records": args.records, "tail": args.tail, "changelog_only": full,
                      "with_snapshot": snap, "snapshot_bytes": snapshot_bytes, "speedup": round(speedup, 1),
                      "identical": equal, "local_checkpoint_ms": round(local_checkpoint * 1000, 1),
                      "machine": f"{platform.machine()} {len(__import__('os').sched_getaffinity(0))} cores, "
                                 f"Python {platform.python_version()}"}))
    return 0 if equal and speedup >= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
