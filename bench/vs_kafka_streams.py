"""Benchmark: this engine side by side with Kafka Streams (Java) on the sessionize workload (issue 15).

bench/sessionize.py's input (1M click events over 10k users, 4 partitions) is produced once;
then each engine counts sessions (gap 5 min) in a child process of its own against the same
broker and input topic: one stream thread, commit every 5 s, 10 MiB record cache,
at-least-once. The Java side is bench/kafka_streams_java/ (Kafka Streams of the broker's
Kafka version, built with Maven into its git-ignored target/). Both children are measured
the same way: processing seconds from the first poll that returned records to the last
offset commit (each process notes both itself), and the rusage of the whole process (CPU
seconds, max RSS) once it exited. Both outputs must agree on the last count per user.

Prints progress, then as its last line one JSON object:
  runs                 per engine, per run: records/s, cpu_s, records_per_cpu_s, max_rss_mb
  python_vs_java       best run of this engine / best run of Kafka Streams, in records per
                       CPU-second ("per_cpu_second") and in records/s ("per_second")
  outputs_agree        the last count of every user is the same in both outputs

    python bench/vs_kafka_streams.py [--events 1000000] [--users 10000] [--runs 1]
        [--engines java,python] [--bootstrap HOST:PORT]

``--bootstrap`` uses a running broker (e.g. ``tools/kafka/broker.py start``) instead of
starting one, and produces the input only when its topic does not exist yet.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from bench.sessionize import PARTITIONS, produce_events, topology  # noqa: E402
from tools.kafka.broker import LocalKafkaBroker, require_java, require_maven  # noqa: E402
from tools.kafka.topics import read_committed_offsets  # noqa: E402

JAVA_PROJECT = REPO_ROOT / "bench" / "kafka_streams_java"
INPUT = "bench-vs-clicks"
COMMIT_INTERVAL_MS = 5_000


def build_java() -> list[str]:
    """Compile the Kafka Streams application with Maven; returns the java command line
    prefix that runs it."""
    mvn, java = require_maven(), require_java()
    result = subprocess.run([mvn, "-q", "-B", "-f", str(JAVA_PROJECT / "pom.xml"), "package"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise SystemExit(f"Maven could not build {JAVA_PROJECT}:\n{tail}")
    target = JAVA_PROJECT / "target"
    return [java, "-cp", f"{target / 'classes'}{os.pathsep}{target / 'lib' / '*'}", "bench.SessionizeBench"]


def child_command(engine: str, java: list[str] | None, bootstrap: str, app: str, output: str,
                  state_dir: Path) -> list[str]:
    if engine == "java":
        assert java is not None
        return [*java, bootstrap, app, INPUT, output, str(state_dir)]
    return [sys.executable, str(Path(__file__).resolve()), "--child", bootstrap, app, INPUT, output, str(state_dir)]


def run_child(args: list[str]) -> int:
    """This engine in this process (the child side of a run): count sessions until SIGTERM,
    then print the processing window as the Java side does."""
    import logging

    from airflow_stateful_provider.streams import KafkaStreams, StreamsConfig

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    bootstrap, app, source, sink, state_dir = args
    config = StreamsConfig(application_id=app, bootstrap_servers=bootstrap, state_dir=state_dir,
                           commit_interval_ms=COMMIT_INTERVAL_MS)
    streams = KafkaStreams(topology(source, sink), config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    streams.start()
    stop.wait()
    thread = streams.threads[0]
    # monotonic -> wall clock, to compare with the parent's and the Java side's clocks
    offset = time.time() - time.monotonic()
    first, last = thread.first_records_polled_at, thread.last_committed_at
    streams.close(timeout=60)
    print(json.dumps({"first_records_polled_ms": -1 if first is None else round((first + offset) * 1000),
                      "last_committed_ms": -1 if last is None else round((last + offset) * 1000)}), flush=True)
    return 0


def measure(engine: str, command: list[str], admin: KafkaAdminClient, app: str, events: int, work: Path) -> dict:
    """Run one engine's child until its group committed every input record; its rusage once it exited."""
    log_path = work / f"{app}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, cwd=REPO_ROOT)
    started, last_report = time.monotonic(), 0.0
    first_commit: tuple[float, int] | None = None  # (when, committed) at the first report with commits
    try:
        while True:
            committed = sum(read_committed_offsets(admin, app, INPUT).values())
            if committed >= events:
                break
            if process.poll() is not None:
                raise SystemExit(f"{engine} exited with {process.returncode} before committing its input:\n"
                                 + "\n".join(log_path.read_text(errors="replace").splitlines()[-30:]))
            if time.monotonic() - last_report >= 10:
                last_report = time.monotonic()
                if committed and first_commit is None:
                    first_commit = (last_report, committed)
                progress = f"  {engine}: {committed:,}/{events:,} committed, {last_report - started:.0f}s"
                if first_commit is not None and committed > first_commit[1]:
                    rate = (committed - first_commit[1]) / (last_report - first_commit[0])
                    progress += f", {rate:,.0f} records/s, ETA {(events - committed) / rate:.0f}s"
                print(progress, flush=True)
            if time.monotonic() - started > 900:
                raise SystemExit(f"{engine} did not commit its input within 900 s (log: {log_path})")
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        out = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if process.returncode is None:
            process.kill()
            process.wait()
    # a JVM ended by SIGTERM exits with 143 after its shutdown hook ran
    if process.returncode not in (0, 128 + signal.SIGTERM) or not out.strip():
        raise SystemExit(f"{engine} exited with {process.returncode}:\n"
                         + "\n".join(log_path.read_text(errors="replace").splitlines()[-30:]))
    window = json.loads(out.decode().strip().splitlines()[-1])
    seconds = (window["last_committed_ms"] - window["first_records_polled_ms"]) / 1000
    cpu = usage.ru_utime + usage.ru_stime
    return {"rps": round(events / seconds), "seconds": round(seconds, 2), "cpu_s": round(cpu, 1),
            "records_per_cpu_s": round(events / cpu), "max_rss_mb": round(usage.ru_maxrss / 1024)}


def last_counts(bootstrap: str, topic: str) -> dict[str, int | None]:
    """The last value per key of ``topic`` (key: user, value: int64 count or None)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=10_000)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        last: dict[str, int | None] = {}
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    last[r.key.decode()] = None if r.value is None else struct.unpack(">q", r.value)[0]
        return last
    finally:
        consumer.close()


def input_exists(admin: KafkaAdminClient) -> bool:
    return INPUT in admin.list_topics()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1, help="runs per engine, alternating (default 1)")
    parser.add_argument("--engines", default="java,python", help="comma-separated: java, python")
    parser.add_argument("--bootstrap", help="a running broker to use instead of starting one")
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = sorted(set(engines) - {"java", "python"})
    if unknown or not engines:
        parser.error(f"--engines: unknown engine(s) {unknown}; choose from java, python")
    work = Path(tempfile.mkdtemp(prefix="bench-vs-kafka-streams-"))
    java = None
    if "java" in engines:
        t0 = time.monotonic()
        java = build_java()
        print(f"built the Kafka Streams application in {time.monotonic() - t0:.1f}s", flush=True)
    stamp = time.strftime("%H%M%S")
    expected = args.events // args.users * args.users
    broker = nullcontext(None) if args.bootstrap else LocalKafkaBroker(work / "kafka")
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    outputs: dict[str, str] = {}
    with broker as started:
        bootstrap = args.bootstrap or started.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        if not (args.bootstrap and input_exists(admin)):
            admin.create_topics([NewTopic(INPUT, PARTITIONS, 1)])
            t0 = time.monotonic()
            produce_events(bootstrap, args.events, args.users, topic=INPUT)
            print(f"produced {args.events:,} events in {time.monotonic() - t0:.1f}s", flush=True)
        for run in range(args.runs):
            for engine in engines:
                app = f"bench-vs-{engine}-{stamp}-{run}"
                output = f"{app}-out"
                admin.create_topics([NewTopic(output, PARTITIONS, 1)])
                command = child_command(engine, java, bootstrap, app, output, work / f"{app}-state")
                result = measure(engine, command, admin, app, expected, work)
                runs[engine].append(result)
                outputs[engine] = output
                print(f"{engine}: {expected:,} records in {result['seconds']:.1f}s: {result['rps']:,} records/s, "
                      f"{result['cpu_s']} CPU s ({result['records_per_cpu_s']:,} records per CPU-second), "
                      f"max RSS {result['max_rss_mb']} MB", flush=True)
        counts = {engine: last_counts(bootstrap, topic) for engine, topic in outputs.items()}
        admin.close()
    shutil.rmtree(work, ignore_errors=True)
    agree = len({json.dumps(c, sort_keys=True) for c in counts.values()}) == 1
    for engine, c in counts.items():
        print(f"{engine}: last counts of {len(c):,} users, total {sum(v or 0 for v in c.values()):,}", flush=True)
    result: dict = {"events": expected, "users": args.users, "runs": runs, "outputs_agree": agree}
    if len(engines) == 2:
        best = {e: max(runs[e], key=lambda r: r["records_per_cpu_s"]) for e in engines}
        result["python_vs_java"] = {
            "per_cpu_second": round(best["python"]["records_per_cpu_s"] / best["java"]["records_per_cpu_s"], 3),
            "per_second": round(max(r["rps"] for r in runs["python"]) / max(r["rps"] for r in runs["java"]), 3)}
        print(f"this engine / Kafka Streams: {result['python_vs_java']['per_cpu_second']:.2f} in records per "
              f"CPU-second, {result['python_vs_java']['per_second']:.2f} in records/s; outputs "
              f"{'agree' if agree else 'DIFFER'}", flush=True)
    result["machine"] = f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"
    print(json.dumps(result))
    return 0 if agree else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.exit(run_child(sys.argv[2:]))
    sys.exit(main())
