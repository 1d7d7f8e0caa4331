"""Benchmark: end-to-end latency at fixed input rates, this engine and Kafka Streams (issue 36).

    .venv/bin/python bench/latency.py [--rates 1000,5000] [--seconds 30] [--guarantee G ...]
        [--engines java,python] [--users 10000]

The sessionize topology of bench/vs_kafka_streams.py (its harness starts both engines: one
process of this engine, one JVM with one stream thread), on one broker. For each guarantee,
rate and engine: a fresh input and output topic, both with ``message.timestamp.type=
LogAppendTime`` (so every record carries the broker's append time); the engine starts and
warms up (its first output seen); then a producer sends ``rate`` records a second for
``--seconds`` (20 bursts a second, ``linger_ms=5``, default batch size, acks=1, keys cycling
over ``--users`` users); the engine runs until its group committed every record.

Latency of an input record = append time of the first output record of its key appended at or
after it, minus its own append time (outputs read ``read_committed``). With 10k users a key
gets a record every 10 s at 1k/s (2 s at 5k/s), so the output that follows a record is the
one it caused. Settings are Kafka Streams' defaults per guarantee: exactly-once commits every
100 ms with the 10 MiB record cache (outputs are visible at commit); at-least-once commits
every 30 s with the record cache off, so each output is sent as it is produced (with the
cache on, at-least-once outputs would wait for the 30 s commit). A rate an engine does not
sustain shows as a growing latency (its max near the run's length) and an end-to-end rate
below the target.

Prints progress and a table; the last line is one JSON object. Exits 1 when the two engines'
outputs (last count per user) differ.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from kafka import KafkaAdminClient, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from bench.sessionize import PARTITIONS  # noqa: E402
from bench.vs_kafka_streams import (  # noqa: E402
    build_java,
    child_commands,
    committed_records,
    cpu_model,
    last_counts,
    parse_engines,
)
from tools.kafka.broker import LocalKafkaBroker  # noqa: E402
from tools.kafka.topics import read_committed_offsets  # noqa: E402

#: Per guarantee: commit interval ms and record cache bytes (module docstring).
SETTINGS = {"exactly_once_v2": (100, 10 * 1024 * 1024), "at_least_once": (30_000, 0)}
NO_PROGRESS_S = 90
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


def steady_produce(bootstrap: str, topic: str, rate: int, seconds: float, users: int) -> int:
    """``rate * seconds`` records (the same keys in the same order each time) at ``rate`` a
    second, in 20 bursts a second; returns how many."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
    step, total = max(1, rate // 20), int(rate * seconds)
    sent, started = 0, time.monotonic()
    while sent < total:
        for _ in range(min(step, total - sent)):
            producer.send(topic, key=f"user-{(sent * 7919) % users:05d}".encode(), value=b"c")
            sent += 1
        producer.flush()
        time.sleep(max(0.0, started + sent / rate - time.monotonic()))
    producer.flush()
    producer.close()
    return sent


def read_times(bootstrap: str, topic: str) -> list[tuple[bytes, int]]:
    """(key, append time) of every committed record of ``topic``."""
    return [(r.key, r.timestamp) for r in committed_records(bootstrap, topic)]


def latencies(inputs: list[tuple[bytes, int]], outputs: list[tuple[bytes, int]]) -> list[int]:
    """Per input record: the first output of its key appended at or after it, minus its append time."""
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for key, ts in outputs:
        by_key[key].append(ts)
    for times in by_key.values():
        times.sort()
    found = []
    for key, ts in inputs:
        times = by_key.get(key, [])
        i = bisect.bisect_left(times, ts)
        if i < len(times):
            found.append(times[i] - ts)
    return found


def percentiles(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"samples": 0}
    ordered = sorted(values)

    def at(q: float) -> int:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"samples": len(ordered), "p50_ms": at(0.50), "p99_ms": at(0.99), "p999_ms": at(0.999),
            "max_ms": ordered[-1]}


def run_engine(engine: str, java: list[str] | None, bootstrap: str, admin: KafkaAdminClient, guarantee: str,
               rate: int, args: argparse.Namespace, work: Path, stamp: str) -> dict:
    commit_ms, cache = SETTINGS[guarantee]
    app = f"bench-latency-{engine}-{guarantee}-{rate}-{stamp}"
    source, output = f"{app}-in", f"{app}-out"
    admin.create_topics([NewTopic(source, PARTITIONS, -1, topic_configs=APPEND_TIME),
                         NewTopic(output, PARTITIONS, -1, topic_configs=APPEND_TIME)])
    [command] = child_commands(engine, java, bootstrap, app, source, output, work / f"{app}-state", guarantee,
                               commit_ms, 1, cache)
    log_path = work / f"{app}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, cwd=REPO_ROOT)
    try:
        warm = steady_produce(bootstrap, source, 20, 1.0, args.users)  # 20 records; wait for their output
        deadline = time.monotonic() + 120
        while not read_times(bootstrap, output):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{engine} produced no output while warming up (log {log_path})")
            time.sleep(0.5)
        warmed_at_ms = time.time() * 1000
        sent = steady_produce(bootstrap, source, rate, args.seconds, args.users)
        produced_s = time.time() - warmed_at_ms / 1000
        total, last, progressed = warm + sent, -1, time.monotonic()
        while (committed := sum(read_committed_offsets(admin, app, source).values())) < total:
            if committed > last:
                last, progressed = committed, time.monotonic()
            if process.poll() is not None or time.monotonic() - progressed > NO_PROGRESS_S:
                raise SystemExit(f"{engine}: committed {committed:,}/{total:,} (log {log_path})")
            time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        process.stdout.read()  # type: ignore[union-attr]
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if process.returncode is None:
            process.kill()
            process.wait()
    inputs = _after(read_times(bootstrap, source), warmed_at_ms)
    figures = percentiles(latencies(inputs, read_times(bootstrap, output)))
    return {"rate": rate, "sent": sent, "sent_per_s": round(sent / produced_s), **figures,
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "output_topic": output}


def _after(records: list[tuple[bytes, int]], ms: float) -> list[tuple[bytes, int]]:
    """The records appended after the warm-up."""
    return [(key, ts) for key, ts in records if ts >= ms]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,5000", help="records per second, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each rate is produced")
    parser.add_argument("--guarantee", action="append", choices=sorted(SETTINGS),
                        help="may be given twice (default: both)")
    parser.add_argument("--engines", default="java,python", type=parse_engines, help="comma-separated: java, python")
    parser.add_argument("--users", type=int, default=10_000)
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",") if r.strip()]
    engines = args.engines
    if not rates or min(rates) < 20:
        parser.error(f"--rates must be >= 20 records/s, got {args.rates!r}")
    machine = f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"machine: {machine}; command: {' '.join(sys.argv)}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    java = build_java() if "java" in engines else None
    stamp = time.strftime("%H%M%S")
    results: list[dict] = []
    agree = True
    with LocalKafkaBroker(work / "kafka") as broker:
        bootstrap = broker.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            for guarantee in args.guarantee or sorted(SETTINGS):
                for rate in rates:
                    outputs = {}
                    for engine in engines:
                        result = run_engine(engine, java, bootstrap, admin, guarantee, rate, args, work, stamp)
                        outputs[engine] = result.pop("output_topic")
                        results.append({"guarantee": guarantee, "engine": engine, **result})
                        print(json.dumps(results[-1]), flush=True)
                    # the same sequence of keys was sent to each engine: their last counts must agree
                    counts = [json.dumps(last_counts(bootstrap, topic), sort_keys=True) for topic in outputs.values()]
                    agree = agree and len(set(counts)) == 1
        finally:
            admin.close()
    names = {"java": "Kafka Streams", "python": "this engine"}
    print(f"{'guarantee':<16} {'rate':>6} {'engine':<14} {'sent/s':>7} {'p50':>6} {'p99':>6} {'p99.9':>6} "
          f"{'max':>6} (ms)  CPU s")
    for r in results:
        print(f"{r['guarantee']:<16} {r['rate']:>6} {names[r['engine']]:<14} {r['sent_per_s']:>7} "
              f"{r.get('p50_ms', '-'):>6} {r.get('p99_ms', '-'):>6} {r.get('p999_ms', '-'):>6} "
              f"{r.get('max_ms', '-'):>6}       {r['cpu_s']}")
    print(f"outputs agree: {agree}; machine shared with other work: wall-clock latencies move with its load")
    print(json.dumps({"machine": machine, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "command": " ".join(sys.argv), "seconds": args.seconds, "users": args.users,
                      "results": results, "outputs_agree": agree}))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
