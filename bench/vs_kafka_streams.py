"""Benchmark: this engine side by side with Kafka Streams (Java) on the sessionize workload (issues 15, 26).

bench/sessionize.py's input (click events over 10k users, 4 partitions) is produced once
per event count; then each engine counts sessions (gap 5 min) against the same broker and
input topic, at each guarantee asked for: this engine in ``--instances`` processes of one
application, Kafka Streams in one JVM with as many stream threads (bench/kafka_streams_java/,
Kafka Streams of the broker's Kafka version, built with Maven into its git-ignored target/).
Both use a 10 MiB record cache and the same commit interval; the defaults are what users
run: exactly_once_v2 at 100 ms (Kafka Streams' default there) on 300k clicks, at-least-once
at 5 s on 1M clicks (this bench's setting since issue 15; Kafka Streams' default is 30 s).

Both engines are measured the same way: processing seconds from the first poll that returned
records (each process notes it) to the moment this script sees the group's committed offsets
cover the input, and the rusage of every process once it exited (CPU seconds summed, max RSS
of the largest). Both outputs must agree on the last committed count per user. Wall-clock
figures move with whatever else runs on the machine; CPU-seconds are the figure to compare.

Prints the CPU model and progress, then as its last line one JSON object:
  machine              CPU model (from /proc/cpuinfo), cores, Python version
  results              per "<guarantee>@<commit interval ms>ms": events, instances, runs per
                       engine (records/s, seconds, cpu_s, records_per_cpu_s, max_rss_mb; this
                       engine's also commits and threads_cpu_s, its first process's CPU by thread),
                       spread per engine (min, median, max of its runs' CPU seconds and records
                       per CPU-second), python_vs_java (best run / best run, "per_cpu_second" and
                       "per_second"; with several runs also "per_cpu_second_median", medians'
                       ratio, and "per_cpu_second_worst_vs_best", this engine's worst run against
                       Kafka Streams' best) and outputs_agree (the last count of every user is
                       the same)

    python bench/vs_kafka_streams.py [--guarantee at_least_once|exactly_once_v2 ...]
        [--commit-interval-ms MS] [--instances N] [--events N] [--users 10000] [--runs 1]
        [--engines java,python] [--bootstrap HOST:PORT | --brokers N] [--chart PNG [--redraw RESULT_JSON]]

``--guarantee`` may be given twice; without it both run. ``--bootstrap`` uses a running broker
(e.g. ``tools/kafka/broker.py start``) instead of starting one, and produces an input only when
its topic does not exist yet. ``--chart`` draws records per CPU-second of both engines at each
guarantee into a PNG (matplotlib: ``pip install -e .[bench]``); with ``--redraw`` from the
last line of an earlier run kept in a file, without measuring (docs/pictures/vs_kafka_streams.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from bench.sessionize import PARTITIONS, produce_events, topology  # noqa: E402
from tools.kafka.broker import LocalKafkaBroker, require_java, require_maven  # noqa: E402
from tools.kafka.cluster import LocalKafkaCluster  # noqa: E402
from tools.kafka.topics import read_committed_offsets  # noqa: E402

JAVA_PROJECT = REPO_ROOT / "bench" / "kafka_streams_java"
GUARANTEES = ("at_least_once", "exactly_once_v2")
#: Per guarantee: (commit interval ms, input events) when not given (module docstring).
DEFAULTS = {"at_least_once": (5_000, 1_000_000), "exactly_once_v2": (100, 300_000)}
#: A run fails when the group's committed offsets did not move for this long.
NO_PROGRESS_S = 120


def cpu_model() -> str:
    """The processor's name as /proc/cpuinfo gives it (figures depend on it)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build_java(main_class: str = "bench.SessionizeBench") -> list[str]:
    """Compile the Kafka Streams applications with Maven; returns the java command line
    prefix that runs ``main_class`` (bench/kafka_streams_java/src/main/java/)."""
    mvn, java = require_maven(), require_java()
    result = subprocess.run([mvn, "-q", "-B", "-f", str(JAVA_PROJECT / "pom.xml"), "package"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise SystemExit(f"Maven could not build {JAVA_PROJECT}:\n{tail}")
    target = JAVA_PROJECT / "target"
    return [java, "-cp", f"{target / 'classes'}{os.pathsep}{target / 'lib' / '*'}", main_class]


def parse_engines(text: str) -> list[str]:
    """``--engines``: comma-separated names out of java and python, at least one."""
    engines = [e.strip() for e in text.split(",") if e.strip()]
    unknown = sorted(set(engines) - {"java", "python"})
    if unknown or not engines:
        raise argparse.ArgumentTypeError(f"{text!r} names {', '.join(unknown) or 'no engine'}; "
                                         "choose from java, python")
    return engines


def child_commands(engine: str, java: list[str] | None, bootstrap: str, app: str, source: str, output: str,
                   state_dir: Path, guarantee: str, commit_ms: int, instances: int,
                   cache_bytes: int | None = None) -> list[list[str]]:
    """One JVM with ``instances`` stream threads, or ``instances`` processes of this engine
    (record cache: ``cache_bytes``, default 10 MiB)."""
    settings = [guarantee, str(commit_ms)]
    cache = [] if cache_bytes is None else [str(cache_bytes)]
    if engine == "java":
        assert java is not None
        return [[*java, bootstrap, app, source, output, str(state_dir), *settings, str(instances), *cache]]
    return [[sys.executable, str(Path(__file__).resolve()), "--child", bootstrap, app, source, output,
             str(state_dir / str(i)), *settings, *cache] for i in range(instances)]


def run_child(args: list[str]) -> int:
    """This engine in this process (the child side of a run): count sessions until SIGTERM,
    then print when its first poll returned records, as the Java side does."""
    import logging

    from airflow_stateful_provider.streams import KafkaStreams, StreamsConfig

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    bootstrap, app, source, sink, state_dir, guarantee, commit_ms, *cache = args
    config = StreamsConfig(application_id=app, bootstrap_servers=bootstrap, state_dir=state_dir,
                           processing_guarantee=guarantee, commit_interval_ms=int(commit_ms),
                           statestore_cache_max_bytes=int(cache[0]) if cache else 10 * 1024 * 1024)
    streams = KafkaStreams(topology(source, sink), config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    streams.start()
    stop.wait()
    thread = streams.threads[0]
    # monotonic -> wall clock, to compare with the parent's and the Java side's clocks
    offset = time.time() - time.monotonic()
    first = thread.first_records_polled_at
    threads_cpu = threads_cpu_seconds()
    streams.close(timeout=60)
    print(json.dumps({"first_records_polled_ms": -1 if first is None else round((first + offset) * 1000),
                      "commits": thread.metrics.commit_total, "threads_cpu_s": threads_cpu}), flush=True)
    return 0


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-?")


def threads_cpu_seconds() -> dict[str, float]:
    """CPU seconds of this process's threads so far, by Python thread name (Linux /proc; other
    threads, RocksDB's own, summed as "native"): which thread a run's CPU went to."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    cpu: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        name = names.get(int(task.name), "native")
        # kafka-python's I/O threads are named after their client id (application, instance
        # id): keep what the client is for
        name = "stream thread" if name.endswith("StreamThread-1") else _UUID.split(name)[-1] or name
        cpu[name] = round(cpu.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick, 2)
    return dict(sorted(cpu.items(), key=lambda item: -item[1]))


def measure(engine: str, commands: list[list[str]], admin: KafkaAdminClient, app: str, source: str,
            events: int, work: Path) -> dict:
    """Run one engine's processes until its group committed every input record; their
    rusage once they exited."""
    logs = [work / f"{app}-{i}.log" for i in range(len(commands))]
    processes = []
    for command, log_path in zip(commands, logs, strict=True):
        with open(log_path, "wb") as log:
            processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, cwd=REPO_ROOT))
    started, last_report = time.monotonic(), 0.0
    progressed_at, last_committed = started, -1
    first_commit: tuple[float, int] | None = None  # (when, committed) at the first report with commits
    usages, outs = [], []
    try:
        while True:
            committed = sum(read_committed_offsets(admin, app, source).values())
            if committed >= events:
                done_ms = time.time() * 1000
                break
            now = time.monotonic()
            if committed > last_committed:
                progressed_at, last_committed = now, committed
            for process, log_path in zip(processes, logs, strict=True):
                if process.poll() is not None:
                    raise SystemExit(f"{engine} exited with {process.returncode} before committing its input:\n"
                                     + _tail(log_path))
            if now - last_report >= 10:
                last_report = now
                if committed and first_commit is None:
                    first_commit = (now, committed)
                progress = f"  {engine}: {committed:,}/{events:,} committed, {now - started:.0f}s"
                if first_commit is not None and committed > first_commit[1]:
                    rate = (committed - first_commit[1]) / (now - first_commit[0])
                    progress += f", {rate:,.0f} records/s, ETA {(events - committed) / rate:.0f}s"
                print(progress, flush=True)
            if now - progressed_at > NO_PROGRESS_S:
                raise SystemExit(f"{engine}: committed offsets stuck at {committed:,}/{events:,} for "
                                 f"{NO_PROGRESS_S} s (logs: {work})")
            time.sleep(0.2)
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            outs.append(process.stdout.read())
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            usages.append(usage)
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                process.wait()
    firsts, reports = [], []
    for process, out, log_path in zip(processes, outs, logs, strict=True):
        # a JVM ended by SIGTERM exits with 143 after its shutdown hook ran
        if process.returncode not in (0, 128 + signal.SIGTERM) or not out.strip():
            raise SystemExit(f"{engine} exited with {process.returncode}:\n" + _tail(log_path))
        reports.append(json.loads(out.decode().strip().splitlines()[-1]))
        if reports[-1]["first_records_polled_ms"] > 0:
            firsts.append(reports[-1]["first_records_polled_ms"])
    seconds = (done_ms - min(firsts)) / 1000
    cpu = sum(u.ru_utime + u.ru_stime for u in usages)
    result = {"rps": round(events / seconds), "seconds": round(seconds, 2), "cpu_s": round(cpu, 1),
              "records_per_cpu_s": round(events / cpu), "max_rss_mb": round(max(u.ru_maxrss for u in usages) / 1024)}
    if engine == "python":  # where this engine's CPU went: commits made, CPU per thread (first process)
        result["commits"] = sum(r["commits"] for r in reports)
        result["threads_cpu_s"] = reports[0]["threads_cpu_s"]
    return result


def _tail(log_path: Path) -> str:
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])


def committed_records(bootstrap: str, topic: str) -> Iterator[Any]:
    """Every committed record of ``topic``, read from the beginning to the end offsets."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=10_000,
                             isolation_level="read_committed")
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for records in consumer.poll(timeout_ms=500).values():
                yield from records
    finally:
        consumer.close()


def last_counts(bootstrap: str, topic: str) -> dict[str, int | None]:
    """The last committed value per key of ``topic`` (key: user, value: int64 count or None)."""
    return {r.key.decode(): None if r.value is None else struct.unpack(">q", r.value)[0]
            for r in committed_records(bootstrap, topic)}


def ensure_input(admin: KafkaAdminClient, bootstrap: str, events: int, users: int) -> str:
    """The input topic of ``events`` clicks over ``users`` users, produced unless it exists."""
    source = f"bench-vs-clicks-{events}-{users}"
    if source not in admin.list_topics():
        admin.create_topics([NewTopic(source, PARTITIONS, -1)])  # the brokers' default.replication.factor
        t0 = time.monotonic()
        produce_events(bootstrap, events, users, topic=source)
        print(f"produced {events:,} events in {time.monotonic() - t0:.1f}s", flush=True)
    return source


def compare(args: argparse.Namespace, guarantee: str, java: list[str] | None, bootstrap: str,
            admin: KafkaAdminClient, work: Path, stamp: str) -> dict:
    """Both engines at one guarantee: their runs, ratios and whether their outputs agree."""
    commit_ms = args.commit_interval_ms if args.commit_interval_ms is not None else DEFAULTS[guarantee][0]
    events = args.events if args.events is not None else DEFAULTS[guarantee][1]
    print(f"== {guarantee}, commit every {commit_ms} ms, {events:,} clicks, {args.instances} instance(s) / "
          f"stream thread(s)", flush=True)
    source = ensure_input(admin, bootstrap, events, args.users)
    expected = events // args.users * args.users
    runs: dict[str, list[dict]] = {e: [] for e in args.engines}
    outputs: dict[str, str] = {}
    for run in range(args.runs):
        for engine in args.engines:
            app = f"bench-vs-{engine}-{guarantee}-{stamp}-{run}"
            output = f"{app}-out"
            admin.create_topics([NewTopic(output, PARTITIONS, -1)])
            commands = child_commands(engine, java, bootstrap, app, source, output, work / f"{app}-state",
                                      guarantee, commit_ms, args.instances)
            result = measure(engine, commands, admin, app, source, expected, work)
            runs[engine].append(result)
            outputs[engine] = output
            print(f"{engine}: {expected:,} records in {result['seconds']:.1f}s: {result['rps']:,} records/s, "
                  f"{result['cpu_s']} CPU s ({result['records_per_cpu_s']:,} records per CPU-second), "
                  f"max RSS {result['max_rss_mb']} MB", flush=True)
            if "commits" in result:
                print(f"  {result['commits']:,} commits; CPU s by thread: "
                      + ", ".join(f"{name} {cpu}" for name, cpu in list(result["threads_cpu_s"].items())[:6]),
                      flush=True)
    counts = {engine: last_counts(bootstrap, topic) for engine, topic in outputs.items()}
    agree = len({json.dumps(c, sort_keys=True) for c in counts.values()}) == 1
    for engine, c in counts.items():
        print(f"{engine}: last counts of {len(c):,} users, total {sum(v or 0 for v in c.values()):,}", flush=True)
    result: dict = {"guarantee": guarantee, "commit_interval_ms": commit_ms, "events": expected,
                    "users": args.users, "instances": args.instances, "runs": runs,
                    "spread": {e: run_spread(runs[e]) for e in args.engines}, "outputs_agree": agree}
    if args.runs > 1:
        for engine in args.engines:
            cpu = result["spread"][engine]["cpu_s"]
            print(f"{engine}: CPU seconds over {args.runs} runs: min {cpu['min']}, median {cpu['median']}, "
                  f"max {cpu['max']}", flush=True)
    if len(args.engines) == 2:
        result["python_vs_java"] = engine_ratios(runs["python"], runs["java"])
        ratios = result["python_vs_java"]
        print(f"{guarantee}: this engine / Kafka Streams: {ratios['per_cpu_second']:.2f} in records per CPU-second"
              + (f" (medians {ratios['per_cpu_second_median']:.2f}, this engine's worst run / Kafka Streams' best "
                 f"{ratios['per_cpu_second_worst_vs_best']:.2f})" if args.runs > 1 else "")
              + f", {ratios['per_second']:.2f} in records/s; outputs {'agree' if agree else 'DIFFER'}", flush=True)
    return result


def run_spread(runs: list[dict]) -> dict[str, dict[str, float]]:
    """Min, median and max over one engine's runs of its CPU seconds and records per CPU-second:
    how stable the engine's cost is between runs of the same input."""
    return {measure: {"min": min(values), "median": statistics.median(values), "max": max(values)}
            for measure in ("cpu_s", "records_per_cpu_s") for values in [[r[measure] for r in runs]]}


def engine_ratios(python: list[dict], java: list[dict]) -> dict[str, float]:
    """This engine's runs against Kafka Streams': best against best (per CPU-second and per
    second), and with several runs the medians' ratio and this engine's worst run against
    Kafka Streams' best, the figures a claim about the spread rests on."""
    mine = [r["records_per_cpu_s"] for r in python]
    theirs = [r["records_per_cpu_s"] for r in java]
    ratios = {"per_cpu_second": round(max(mine) / max(theirs), 3),
              "per_second": round(max(r["rps"] for r in python) / max(r["rps"] for r in java), 3)}
    if len(python) > 1 or len(java) > 1:
        ratios["per_cpu_second_median"] = round(statistics.median(mine) / statistics.median(theirs), 3)
        ratios["per_cpu_second_worst_vs_best"] = round(min(mine) / max(theirs), 3)
    return ratios


def draw_chart(results: dict[str, dict], machine: str, date: str, path: Path) -> None:
    """Records per CPU-second (best run) of both engines at each setting, as a bar chart."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--chart needs matplotlib: pip install -e .[bench]") from None
    labels = list(results)
    names = {"java": "Kafka Streams", "python": "this engine"}
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.38
    for i, engine in enumerate(["java", "python"]):
        values = [max((r["records_per_cpu_s"] for r in results[k]["runs"].get(engine, [])), default=0)
                  for k in labels]
        bars = ax.bar([x + (i - 0.5) * width for x in range(len(labels))], values, width, label=names[engine])
        ax.bar_label(bars, labels=[f"{v:,}" for v in values], fontsize=8)
    ax.set_xticks(range(len(labels)), [f"{results[k]['guarantee']}\ncommit {results[k]['commit_interval_ms']} ms, "
                                       f"{results[k]['events'] // 1000}k clicks" for k in labels])
    ax.set_ylabel("records per CPU-second")
    ax.set_title(f"sessionize workload, {date}\n{machine}", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"chart written to {path}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guarantee", action="append", choices=GUARANTEES,
                        help="processing guarantee; may be given twice (default: both)")
    parser.add_argument("--commit-interval-ms", type=int,
                        help="default: 5000 at-least-once, 100 exactly-once (module docstring)")
    parser.add_argument("--instances", type=int, default=1,
                        help="processes of this engine, stream threads of the one JVM (default 1)")
    parser.add_argument("--events", type=int, help="default: 1M at-least-once, 300k exactly-once")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1, help="runs per engine, alternating (default 1)")
    parser.add_argument("--engines", default="java,python", type=parse_engines, help="comma-separated: java, python")
    parser.add_argument("--bootstrap", help="a running broker to use instead of starting one")
    parser.add_argument("--brokers", type=int, default=1,
                        help="start a local cluster of this many brokers (tools/kafka/cluster.py: replication "
                             "factor min(3, N), min.insync.replicas 2, acks all) instead of one broker")
    parser.add_argument("--chart", type=Path, help="draw records per CPU-second into this PNG")
    parser.add_argument("--redraw", type=Path, help="with --chart: draw the result line kept in this file")
    args = parser.parse_args()
    if args.redraw is not None:
        if args.chart is None:
            parser.error("--redraw needs --chart")
        kept = json.loads(args.redraw.read_text())
        draw_chart(kept["results"], kept["machine"], kept["date"], args.chart)
        return 0
    if args.instances < 1:
        parser.error(f"--instances must be at least 1, got {args.instances}")
    guarantees = args.guarantee or list(GUARANTEES)
    machine = f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"machine: {machine}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-vs-kafka-streams-"))
    java = None
    if "java" in args.engines:
        t0 = time.monotonic()
        java = build_java()
        print(f"built the Kafka Streams application in {time.monotonic() - t0:.1f}s", flush=True)
    stamp = time.strftime("%H%M%S")
    if args.brokers < 1:
        parser.error(f"--brokers must be at least 1, got {args.brokers}")
    broker: Any = nullcontext(None) if args.bootstrap else LocalKafkaBroker(work / "kafka") if args.brokers == 1 \
        else LocalKafkaCluster(work / "kafka", nodes=args.brokers)
    if not args.bootstrap:
        print(f"brokers: {args.brokers}" + (f" (replication factor {min(3, args.brokers)}, min.insync.replicas "
                                             f"{min(2, args.brokers)}, acks all)" if args.brokers > 1 else ""),
              flush=True)
    results: dict[str, dict] = {}
    with broker as started:
        bootstrap = args.bootstrap or started.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            for guarantee in guarantees:
                result = compare(args, guarantee, java, bootstrap, admin, work, stamp)
                results[f"{guarantee}@{result['commit_interval_ms']}ms"] = result
        finally:
            admin.close()
    shutil.rmtree(work, ignore_errors=True)
    if args.chart is not None:
        draw_chart(results, machine, time.strftime("%Y-%m-%d"), args.chart)
    print(f"machine: {machine}", flush=True)
    print(json.dumps({"machine": machine, "date": time.strftime("%Y-%m-%d"), "brokers": args.brokers,
                      "results": results}))
    return 0 if all(r["outputs_agree"] for r in results.values()) else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.exit(run_child(sys.argv[2:]))
    sys.exit(main())
