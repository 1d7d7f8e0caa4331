"""Benchmark: state at scale (issue 36): a keyed aggregate over ``--keys`` keys, its memory
under the RocksDB budget, and how fast its state comes back.

    .venv/bin/python bench/state_at_scale.py [--keys 5000000] [--passes 1] [--value-bytes 200]
        [--memory-mib 128] [--tail-percent 1] [--engines python,java] [--bootstrap HOST:PORT]

The input holds ``--passes`` records per key, pass after pass (``--value-bytes`` of
incompressible payload, 4 partitions, all in one instance): the first pass only writes new
keys (their absence is a bloom filter check), the later ones read each key's value back, so
the block cache fills. The topology keeps per key a count and the last payload in
a RocksDB key-value store (DSL ``aggregate``, changelogged, no output topic: the figures are
the state's). Each instance runs in a process of its own (this script with ``--child``), so
its max RSS is that of the instance; at-least-once, commits every 5 s.

1. process the input with the default budget (``rocksdb_memory_bytes``), then again with half
   of it in a second application: records/s, CPU seconds, max RSS, RocksDB bytes on disk;
2. a raw fetch of the first application's changelog (a kafka-python consumer reading it to
   its end without applying it, as the engine's consumers read, and plain kafka-python);
3. the changelog restore of that application on a wiped state directory (an instance
   started on it, until RUNNING): seconds to RUNNING (group join included), seconds from the
   tasks' assignment to RUNNING (the restoration itself: a snapshot's download included),
   records/s over the restore window (first store's restore start to the last one's end),
   max RSS;
4. snapshot + tail: the processed task directories are snapshotted (``file://``, the
   runtime's SnapshotTaker), then ``--tail-percent`` more records are processed, and an
   instance starts on a wiped state directory with ``snapshot_url``: it loads the snapshot
   and replays the tail. Compared with the changelog restore of the same changelog.

With ``java`` in ``--engines`` (the default), Kafka Streams of the broker's version runs the
same aggregate (bench/kafka_streams_java/, StateAtScaleBench: the same store, record cache,
commit interval and RocksDB budget, a block cache and write buffer manager shared by its
stores) in an application of its own, in one JVM with default settings: it processes the same
input with the default budget (before the tail is produced), then restores its own changelog
on a wiped state directory, measured as this engine's (to RUNNING, and over the restore window
a StateRestoreListener sees), once its group has no member left. The ratios this engine /
Kafka Streams are printed beside.
Prints progress and figures; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from kafka.errors import KafkaError  # noqa: E402

from bench.sessionize import PARTITIONS, fetch_all  # noqa: E402
from bench.topologies import record_key  # noqa: E402
from bench.vs_kafka_streams import build_java, cpu_model, parse_engines  # noqa: E402
from tools.kafka.broker import LocalKafkaBroker  # noqa: E402
from tools.kafka.topics import produce, read_committed_offsets  # noqa: E402

STORE = "state"
COMMIT_MS = 5_000
NO_PROGRESS_S = 180
MiB = 1 << 20


def topology(source: str) -> Any:
    """Per key: an 8-byte count and the last payload, in the RocksDB store ``state``."""
    from airflow_stateful_provider.streams import Consumed, Materialized, Serdes, StreamsBuilder

    def aggregate(_key: bytes, value: bytes, aggregate: bytes) -> bytes:
        count = int.from_bytes(aggregate[:8], "big") + 1 if aggregate else 1
        return count.to_bytes(8, "big") + value

    builder = StreamsBuilder()
    builder.stream(source, Consumed.with_(Serdes.bytes(), Serdes.bytes())).group_by_key().aggregate(
        lambda: b"", aggregate, Materialized.as_(STORE).with_value_serde(Serdes.bytes()))
    return builder.build()


def run_child(args: list[str]) -> int:
    """One instance in this process. ``process``: until SIGTERM. ``restore``: until RUNNING
    (its tasks restored), then close. Prints one JSON line."""
    import logging

    from airflow_stateful_provider.streams import KafkaStreams, KafkaStreamsState, StreamsConfig

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    mode, bootstrap, app, source, state_dir, memory_bytes, snapshot_url = args
    config = StreamsConfig(application_id=app, bootstrap_servers=bootstrap, state_dir=state_dir,
                           commit_interval_ms=COMMIT_MS, rocksdb_memory_bytes=int(memory_bytes),
                           rocksdb_write_buffer_bytes=int(memory_bytes) // 4,
                           snapshot_url=snapshot_url or None)
    streams = KafkaStreams(topology(source), config)
    window = _RestoreWindow()
    streams.set_global_state_restore_listener(window)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    started = time.monotonic()
    streams.start()
    out: dict[str, Any] = {}
    if mode == "restore":
        assigned: list[float] = []
        threading.Thread(target=_watch_assignment, args=(streams, assigned), daemon=True).start()
        streams.wait_for_state(KafkaStreamsState.RUNNING, KafkaStreamsState.ERROR, timeout=3600)
        running = time.monotonic()
        out = {"restore_s": round(running - started, 2), "restored_records": window.restored,
               "restoring_s": window.seconds(), "assigned_to_running_s": round(running - assigned[0], 2)
               if assigned else None}
    else:
        stop.wait()
        first = streams.threads[0].first_records_polled_at
        out = {"first_records_polled_ms": -1 if first is None else
               round((first + time.time() - time.monotonic()) * 1000)}
    out["rocksdb"] = streams.rocksdb_memory.usage()
    streams.close(timeout=120)
    print(json.dumps(out), flush=True)
    return 0


def _watch_assignment(streams: Any, assigned: list[float]) -> None:
    """Note when the first stream thread leaves STARTING (its tasks assigned), looking every
    5 ms: where a task's restoration starts, a snapshot's download included."""
    while not assigned:
        if any(thread.state.value not in ("CREATED", "STARTING") for thread in streams.threads):
            assigned.append(time.monotonic())
            return
        time.sleep(0.005)


class _RestoreWindow:
    """Records restored, and the time from the first store's restore start to the last one's end."""

    def __init__(self) -> None:
        self.restored = 0
        self.first_start: float | None = None
        self.last_end: float | None = None

    def seconds(self) -> float | None:
        if self.first_start is None or self.last_end is None:
            return None
        return round(self.last_end - self.first_start, 2)

    def on_restore_start(self, *_args: Any) -> None:
        self.first_start = self.first_start or time.monotonic()

    def on_batch_restored(self, _partition: Any, _store: str, _end: int, num_restored: int) -> None:
        self.restored += num_restored

    def on_restore_end(self, *_args: Any) -> None:
        self.last_end = time.monotonic()

    def on_restore_suspended(self, *_args: Any) -> None:
        pass


def child(mode: str, bootstrap: str, app: str, source: str, state_dir: Path, memory: int, work: Path,
          snapshot_url: str = "", java: list[str] | None = None) -> subprocess.Popen:
    """An instance of this engine, or of Kafka Streams when ``java`` (build_java's command) is given."""
    log = open(work / f"{app}-{mode}-{time.monotonic_ns()}.log", "wb")  # the child writes it
    settings = [mode, bootstrap, app, source, str(state_dir), str(memory)]
    command = [*java, *settings] if java else \
        [sys.executable, str(Path(__file__).resolve()), "--child", *settings, snapshot_url]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, cwd=REPO_ROOT)


def finish(process: subprocess.Popen, what: str) -> tuple[dict, Any]:
    """The child's JSON line and its rusage once it exited."""
    out = process.stdout.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    # a JVM ended by SIGTERM exits with 143 after its shutdown hook ran
    if process.returncode not in (0, 128 + signal.SIGTERM) or not out.strip():
        raise SystemExit(f"{what}: the instance exited with {process.returncode} (logs in the work directory)")
    return json.loads(out.decode().strip().splitlines()[-1]), usage


def rusage_figures(usage: Any) -> dict:
    return {"cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "max_rss_mb": round(usage.ru_maxrss / 1024)}


def process(bootstrap: str, admin: KafkaAdminClient, app: str, source: str, state_dir: Path, memory: int,
            records: int, work: Path, new_records: int | None = None, java: list[str] | None = None) -> dict:
    """An instance processes ``source`` until its group committed ``records`` (of which
    ``new_records`` are new to it, default all)."""
    instance = child("process", bootstrap, app, source, state_dir, memory, work, java=java)
    started = last_report = progressed_at = time.monotonic()
    last = -1
    try:
        while (committed := sum(read_committed_offsets(admin, app, source).values())) < records:
            now = time.monotonic()
            if instance.poll() is not None:
                raise SystemExit(f"{app}: the instance exited with {instance.returncode} before committing its input")
            if committed > last:
                progressed_at, last = now, committed
            if now - progressed_at > NO_PROGRESS_S:
                raise SystemExit(f"{app}: committed offsets stuck at {committed:,}/{records:,}")
            if now - last_report >= 15:
                last_report = now
                print(f"  {app}: {committed:,}/{records:,} committed, {now - started:.0f}s", flush=True)
            time.sleep(0.2)
        done_ms = time.time() * 1000
        instance.send_signal(signal.SIGTERM)
        out, usage = finish(instance, app)
    finally:
        if instance.returncode is None:
            instance.kill()
            instance.wait()
    seconds = (done_ms - out["first_records_polled_ms"]) / 1000
    processed = records if new_records is None else new_records
    return {"records": processed, "seconds": round(seconds, 1), "records_per_s": round(processed / seconds),
            **rusage_figures(usage), "rocksdb_usage_at_end": out.get("rocksdb"), "rocksdb_disk_mb": disk_mb(state_dir)}


def restore(bootstrap: str, app: str, source: str, state_dir: Path, memory: int, work: Path,
            snapshot_url: str = "", java: list[str] | None = None) -> dict:
    """An instance on an empty state directory, until its tasks are restored (RUNNING)."""
    shutil.rmtree(state_dir, ignore_errors=True)
    instance = child("restore", bootstrap, app, source, state_dir, memory, work, snapshot_url, java)
    try:
        out, usage = finish(instance, f"{app} restore")
    finally:
        if instance.returncode is None:
            instance.kill()
            instance.wait()
    restoring = out["restoring_s"]
    return {"seconds_to_running": out["restore_s"], "seconds_assigned_to_running": out.get("assigned_to_running_s"),
            "changelog_records": out["restored_records"],
            "restoring_seconds": restoring,
            "records_per_s": round(out["restored_records"] / restoring) if restoring else None,
            **rusage_figures(usage)}


def ratio(numerator: float | None, denominator: float | None, digits: int = 2) -> float | None:
    """``numerator / denominator`` rounded, None when either is missing or zero."""
    return round(numerator / denominator, digits) if numerator and denominator else None


def wait_until_empty(admin: KafkaAdminClient, group: str, timeout_s: float = 120) -> float:
    """Seconds until ``group`` has no member: a member that closed without leaving stays until
    its session timed out (Kafka Streams' default: 45 s), and a restoring instance's time to
    RUNNING should not include that wait (the bench measures a restore, not a crash)."""
    started = time.monotonic()
    while True:
        try:
            if not (admin.describe_groups([group]).get(group) or {}).get("members"):
                break
        except KafkaError as exc:  # the coordinator not there yet
            if not exc.retriable:
                raise
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"consumer group {group} still has members after {timeout_s:.0f}s")
        time.sleep(0.5)
    return time.monotonic() - started


def disk_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / MiB, 1)


def snapshot_task_dirs(bootstrap: str, app: str, source: str, state_dir: Path, url: str) -> float:
    """Snapshot every task directory of a stopped instance with the runtime's SnapshotTaker
    (as after a commit); returns the seconds to upload them all."""
    from airflow_stateful_provider.streams.config import StreamsConfig
    from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
    from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
    from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
    from airflow_stateful_provider.streams.snapshots.taking import SnapshotTaker
    from airflow_stateful_provider.streams.task_id import TaskId

    config = StreamsConfig(application_id=app, bootstrap_servers=bootstrap, state_dir=str(state_dir),
                           snapshot_url=url)
    taker = SnapshotTaker(SnapshotStorage(url), app, "at_least_once", interval_ms=0, interval_commits=1, keep=2)
    started = time.monotonic()
    for partition in range(PARTITIONS):
        task = TaskId(0, partition)
        stores = TaskStateManager(task, topology(source), config, record_collector=RecordCollector(None, task_id=task))
        stores.initialize()
        taker.after_commit(task, stores.task_dir, stores.snapshot_stores())
        if not taker.wait_idle(1800):
            raise SystemExit(f"snapshot of task {task} did not finish")
        stores.close()
    if taker.uploaded != PARTITIONS:
        raise SystemExit(f"{taker.uploaded} of {PARTITIONS} snapshots uploaded ({taker.failed} failed)")
    taker.close()
    return time.monotonic() - started


def produce_input(bootstrap: str, topic: str, first: int, count: int, keys: int, value_bytes: int) -> float:
    """Records ``first .. first + count - 1``, record i for key ``i % keys``; returns the seconds it took."""
    rng = random.Random(36)
    payloads = [rng.randbytes(value_bytes) for _ in range(4096)]  # distinct enough that RocksDB cannot compress
    started = time.monotonic()
    produce(bootstrap, topic, ((record_key(i % keys), payloads[i % 4096]) for i in range(first, first + count)),
            linger_ms=50, batch_size=1024 * 1024, acks=1)
    return time.monotonic() - started


def vs_kafka_streams(process_mine: dict, process_theirs: dict, restore_mine: dict,
                     restore_theirs: dict) -> dict[str, float | None]:
    """This engine / Kafka Streams: above 1 is this engine faster, except ``max_rss`` (above 1:
    this engine uses more memory). Restore records/s are over each restore window."""
    return {"restore_records_per_s": ratio(restore_mine["records_per_s"], restore_theirs["records_per_s"]),
            "restore_to_running": ratio(restore_theirs["seconds_to_running"], restore_mine["seconds_to_running"]),
            "records_per_s": ratio(process_mine["records_per_s"], process_theirs["records_per_s"]),
            "records_per_cpu_s": ratio(process_mine["records"] / process_mine["cpu_s"],
                                       process_theirs["records"] / process_theirs["cpu_s"]),
            "max_rss": ratio(process_mine["max_rss_mb"], process_theirs["max_rss_mb"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=5_000_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--passes", type=int, default=1,
                        help="records per key in the input (from the second on, each update reads the key's value)")
    parser.add_argument("--memory-mib", type=int, default=128, help="rocksdb_memory_bytes of the first run, MiB")
    parser.add_argument("--tail-percent", type=float, default=1.0, help="records after the snapshot, %% of --keys")
    parser.add_argument("--engines", default="python,java", type=parse_engines,
                        help="comma-separated: python (this engine), java (Kafka Streams beside it)")
    parser.add_argument("--bootstrap", help="a running broker to use instead of starting one")
    args = parser.parse_args()
    load_at_start = os.getloadavg()[0]
    if "python" not in args.engines:
        parser.error(f"--engines must include python (this engine's figures are the bench's), got {args.engines}")
    java = build_java("bench.StateAtScaleBench") if "java" in args.engines else None
    machine = f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"machine: {machine}; command: {' '.join(sys.argv)}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-state-at-scale-"))
    stamp = time.strftime("%H%M%S")
    source = f"bench-scale-{stamp}-in"
    memory = args.memory_mib * MiB
    tail = max(PARTITIONS, int(args.keys * args.tail_percent / 100))
    records = args.keys * args.passes
    broker: Any = nullcontext(None) if args.bootstrap else LocalKafkaBroker(work / "kafka")
    with broker as started:
        bootstrap = args.bootstrap or started.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_topics([NewTopic(source, PARTITIONS, -1)])
            seconds = produce_input(bootstrap, source, 0, records, args.keys, args.value_bytes)
            print(f"produced {records:,} records of {args.value_bytes} bytes over {args.keys:,} keys in "
                  f"{seconds:.0f}s", flush=True)
            runs = {}
            for name, budget in (("budget", memory), ("half_budget", memory // 2)):
                app = f"bench-scale-{stamp}-{name}"
                runs[name] = process(bootstrap, admin, app, source, work / app, budget, records, work)
                print(f"{name} ({budget // MiB} MiB): {json.dumps(runs[name])}", flush=True)
            java_app = f"bench-scale-{stamp}-java"
            if java:  # before the tail is produced: the same input as this engine's first run
                runs["kafka_streams"] = process(bootstrap, admin, java_app, source, work / java_app, memory, records,
                                                work, java=java)
                print(f"Kafka Streams ({args.memory_mib} MiB): {json.dumps(runs['kafka_streams'])}", flush=True)
            app = f"bench-scale-{stamp}-budget"
            changelog = f"{app}-{STORE}-changelog"
            url = f"file://{work / 'shared'}"
            upload_s = snapshot_task_dirs(bootstrap, app, source, work / app, url)
            print(f"snapshots of {PARTITIONS} tasks uploaded in {upload_s:.1f}s "
                  f"({disk_mb(work / 'shared'):,.0f} MiB)", flush=True)
            produce_input(bootstrap, source, records, tail, args.keys, args.value_bytes)
            runs["tail"] = process(bootstrap, admin, app, source, work / app, memory, records + tail, work, tail)
            fetched_plain, fetch_plain_s = fetch_all(bootstrap, changelog, engine_decoding=False)
            fetched, fetch_s = fetch_all(bootstrap, changelog, engine_decoding=True)
            raw = {"records": fetched, "seconds": round(fetch_s, 2), "records_per_s": round(fetched / fetch_s),
                   "plain_kafka_python_records_per_s": round(fetched_plain / fetch_plain_s)}
            print(f"raw fetch of {changelog}: {json.dumps(raw)}", flush=True)
            from_changelog = restore(bootstrap, app, source, work / app, memory, work)
            print(f"changelog restore: {json.dumps(from_changelog)}", flush=True)
            from_snapshot = restore(bootstrap, app, source, work / app, memory, work, url)
            print(f"snapshot + tail restore: {json.dumps(from_snapshot)}", flush=True)
            if java:
                print(f"Kafka Streams' group empty after {wait_until_empty(admin, java_app):.1f}s", flush=True)
                java_restore = restore(bootstrap, java_app, source, work / java_app, memory, work, java=java)
                print(f"Kafka Streams changelog restore: {json.dumps(java_restore)}", flush=True)
        finally:
            admin.close()
    shutil.rmtree(work, ignore_errors=True)
    result = {
        "machine": machine, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(sys.argv), "keys": args.keys, "passes": args.passes, "value_bytes": args.value_bytes,
        "memory_mib": args.memory_mib, "tail_records": tail, "runs": runs, "raw_fetch": raw,
        "changelog_restore": from_changelog, "snapshot_restore": from_snapshot, "snapshot_upload_s": round(upload_s, 1),
        "restore_vs_raw_fetch": round((from_changelog["records_per_s"] or 0) / raw["records_per_s"], 2),
        "snapshot_speedup": ratio(from_changelog["seconds_to_running"], from_snapshot["seconds_to_running"], 1),
        "snapshot_speedup_from_assignment": ratio(from_changelog["seconds_assigned_to_running"],
                                                  from_snapshot["seconds_assigned_to_running"], 1),
        "half_budget_rss_below": runs["half_budget"]["max_rss_mb"] < runs["budget"]["max_rss_mb"],
        "load_average_start_end": [round(load_at_start, 1), round(os.getloadavg()[0], 1)],
    }
    if java:
        result["kafka_streams_restore"] = java_restore
        result["vs_kafka_streams"] = vs_kafka_streams(runs["budget"], runs["kafka_streams"], from_changelog,
                                                      java_restore)
    print(f"processing {runs['budget']['records_per_s']:,} records/s, max RSS {runs['budget']['max_rss_mb']} MB at "
          f"{args.memory_mib} MiB, {runs['half_budget']['max_rss_mb']} MB at half; RocksDB on disk "
          f"{runs['budget']['rocksdb_disk_mb']:,} MiB; restore {from_changelog['records_per_s']:,} records/s = "
          f"{result['restore_vs_raw_fetch']}x the raw fetch; snapshot + tail "
          f"{result['snapshot_speedup']}x faster to RUNNING, {result['snapshot_speedup_from_assignment']}x from the "
          f"assignment (load average {result['load_average_start_end'][0]} at "
          f"the start, {result['load_average_start_end'][1]} at the end)", flush=True)
    if java:
        ratios, theirs = result["vs_kafka_streams"], runs["kafka_streams"]
        print(f"Kafka Streams: processing {theirs['records_per_s']:,} records/s, {theirs['cpu_s']} CPU s, max RSS "
              f"{theirs['max_rss_mb']} MB; restore {java_restore['records_per_s']:,} records/s, "
              f"{java_restore['seconds_to_running']} s to RUNNING. This engine / Kafka Streams: restore "
              f"{ratios['restore_records_per_s']}x in records/s, {ratios['restore_to_running']}x in time to "
              f"RUNNING; processing {ratios['records_per_cpu_s']}x per CPU-second, max RSS "
              f"{ratios['max_rss']}x", flush=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.exit(run_child(sys.argv[2:]))
    sys.exit(main())
