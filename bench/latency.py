"""Benchmark: end-to-end latency at fixed input rates, this engine and Kafka Streams (issue 36).

    .venv/bin/python bench/latency.py [--rates 1000,5000,10000] [--seconds 30] [--guarantee G ...]
        [--engines java,python] [--users 10000] [--max-rate 20000] [--search-steps 2]
        [--events rebalance,restore] [--event-rate 1000] [--event-window-s 10] [--json PATH]

The sessionize topology of bench/vs_kafka_streams.py (its harness starts both engines: a
process of this engine, a JVM with one stream thread: one instance each), on one broker. For
each guarantee, rate and engine: a fresh input and output topic, both with
``message.timestamp.type=LogAppendTime`` (every record carries the broker's append time); the
engine starts and warms up (its first output seen); then a producer sends ``rate`` records a
second for ``--seconds`` (20 bursts a second, ``linger_ms=5``, default batch size, acks=1, keys
cycling over ``--users`` users, the same sequence for both engines); the engine runs until its
group committed every record. bench/latency_figures.py defines the figures: latency per record,
p50/p99/p99.9/max, when a rate is *sustained*, and the pause around an event.

Settings are Kafka Streams' defaults per guarantee: exactly-once commits every 100 ms with the
10 MiB record cache (outputs are sent at commit); at-least-once commits every 30 s with the
record cache off, so each output is sent as it is produced. The engines' own producer settings
stay (Kafka Streams lingers 100 ms by default, this engine 5 ms).

The highest sustained rate per instance: after the fixed ``--rates`` (an engine that did not
sustain one, or whose producer fell short, is not run at the higher ones), a search from the
highest sustained rate upward (x1.5 up to ``--max-rate``, then halving the bracket), at most
``--search-steps`` runs per engine and guarantee; a run whose producer fell short ends it.
Events, at ``--event-rate``: *rebalance*, a second instance of the same engine (its own state
directory) joins halfway through the input; *restore*, the instance is stopped (SIGTERM)
halfway through, its state directory wiped, and it is started again. An instance of this
engine leaves the group when it closes. A Kafka Streams instance does not (a dynamic member
stays in the group until its session times out, 45 s, and a restart waits that out), so its
instances here are static members (``group.instance.id``: Kafka Streams' way to restart an
instance, which takes back its tasks at once); ``--java-dynamic-members``: as Kafka Streams
does by default.

Prints progress and tables; the last line is one JSON object (``--json`` also writes it to a
file, which docs/pictures/latency.py draws). Exits 1 when the two engines' outputs (last count
per user) differ in a run where both ran at the same rate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from kafka import KafkaAdminClient, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from bench.latency_figures import event_figures, latencies, next_rate, percentile, percentiles, sustained  # noqa: E402
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
EVENTS = ("rebalance", "restore")
NO_PROGRESS_S = 90
STOP_TIMEOUT_S = 90
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
#: Quantiles kept per run for the chart of the distributions.
CHART_QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9995, 0.9999)
NAMES = {"java": "Kafka Streams", "python": "this engine"}


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


class Instances:
    """The processes of one engine's application in one run, by name: started, stopped (their
    CPU time summed), restarted on a wiped state directory."""

    def __init__(self, engine: str, java: list[str] | None, bootstrap: str, app: str, source: str, output: str,
                 guarantee: str, work: Path, static: bool) -> None:
        self.engine, self.java, self.bootstrap, self.app, self.static = engine, java, bootstrap, app, static
        self.source, self.output, self.guarantee, self.work = source, output, guarantee, work
        self.running: dict[str, subprocess.Popen] = {}
        self.cpu_s = 0.0

    def state_dir(self, name: str) -> Path:
        return self.work / f"{self.app}-state-{name}"

    def log(self, name: str) -> Path:
        return self.work / f"{self.app}-{name}.log"

    def start(self, name: str) -> None:
        commit_ms, cache = SETTINGS[self.guarantee]
        [command] = child_commands(self.engine, self.java, self.bootstrap, self.app, self.source, self.output,
                                   self.state_dir(name), self.guarantee, commit_ms, 1, cache)
        if self.engine == "java" and self.static:  # a JVM system property (bench/kafka_streams_java)
            command = [command[0], f"-Dbench.groupInstanceId={self.app}-{name}", *command[1:]]
        with open(self.log(name), "ab") as log:
            self.running[name] = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, cwd=REPO_ROOT)

    def stop(self, name: str) -> None:
        """SIGTERM, then wait for the exit (at most STOP_TIMEOUT_S, then SIGKILL)."""
        process = self.running.pop(name)
        process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                process.kill()
                _, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.1)
        process.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_s += usage.ru_utime + usage.ru_stime
        if process.returncode not in (0, 128 + signal.SIGTERM):
            raise SystemExit(f"{self.engine} {name} exited with {process.returncode} (log {self.log(name)})")

    def restart_wiped(self, name: str) -> None:
        self.stop(name)
        shutil.rmtree(self.state_dir(name), ignore_errors=True)
        self.start(name)

    def check_alive(self) -> None:
        for name, process in self.running.items():
            if process.poll() is not None:
                raise SystemExit(f"{self.engine} {name} exited with {process.returncode} (log {self.log(name)})")

    def stop_all(self) -> None:
        for name in list(self.running):
            self.stop(name)

    def kill_all(self) -> None:
        for process in self.running.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def run_engine(engine: str, java: list[str] | None, bootstrap: str, admin: KafkaAdminClient, guarantee: str,
               rate: int, event: str | None, args: argparse.Namespace, work: Path, stamp: str) -> dict:
    """One engine at one rate, with ``event`` halfway through the input or none; its figures."""
    app = f"bench-latency-{engine}-{guarantee}-{rate}-{event or 'steady'}-{stamp}"
    source, output = f"{app}-in", f"{app}-out"
    admin.create_topics([NewTopic(source, PARTITIONS, -1, topic_configs=APPEND_TIME),
                         NewTopic(output, PARTITIONS, -1, topic_configs=APPEND_TIME)])
    instances = Instances(engine, java, bootstrap, app, source, output, guarantee, work,
                          static=not args.java_dynamic_members)
    instances.start("a")
    fired: list[float] = []

    def fire() -> None:
        fired.append(time.time() * 1000)
        if event == "rebalance":
            instances.start("b")
        else:
            instances.restart_wiped("a")

    timer = threading.Timer(args.seconds / 2, fire) if event else None
    try:
        warm = steady_produce(bootstrap, source, 20, 1.0, args.users)  # 20 records; wait for their output
        deadline = time.monotonic() + 120
        while not read_times(bootstrap, output):
            instances.check_alive()
            if time.monotonic() > deadline:
                raise SystemExit(f"{engine} produced no output while warming up (log {instances.log('a')})")
            time.sleep(0.5)
        warmed_at_ms = time.time() * 1000
        if timer is not None:
            timer.start()
        sent = steady_produce(bootstrap, source, rate, args.seconds, args.users)
        if timer is not None:
            timer.join()
            if not fired:
                raise SystemExit(f"{engine}: the {event} did not happen")
        total, last, progressed = warm + sent, -1, time.monotonic()
        while (committed := sum(read_committed_offsets(admin, app, source).values())) < total:
            if committed > last:
                last, progressed = committed, time.monotonic()
            instances.check_alive()
            if time.monotonic() - progressed > NO_PROGRESS_S:
                raise SystemExit(f"{engine}: committed {committed:,}/{total:,} (logs {work})")
            time.sleep(0.5)
        instances.stop_all()
    finally:
        if timer is not None:
            timer.cancel()
        instances.kill_all()
    inputs = [(key, ts) for key, ts in read_times(bootstrap, source) if ts >= warmed_at_ms]
    outputs = read_times(bootstrap, output)
    timed = latencies(inputs, outputs)
    values = sorted(latency for _, latency in timed)
    result = {"guarantee": guarantee, "engine": engine, "rate": rate, "event": event, "sent": sent,
              **percentiles(values), **sustained(timed, len(inputs), rate), "cpu_s": round(instances.cpu_s, 1),
              "distribution": [[q, percentile(values, q)] for q in CHART_QUANTILES] if values else []}
    if event:
        result.update(event_figures(timed, sorted(ts for _, ts in outputs if ts >= warmed_at_ms),
                                    round(warmed_at_ms), round(fired[0]), round(args.event_window_s * 1000)))
    result["output_topic"] = output
    return result


def summary(results: list[dict]) -> dict[str, Any]:
    """Per guarantee and engine the highest sustained rate; per rate both sustained, whether this
    engine's p99 is at or below Kafka Streams'."""
    steady = [r for r in results if r["event"] is None]
    highest: dict[str, dict[str, Any]] = {}
    for r in steady:
        best = highest.setdefault(r["guarantee"], {}).setdefault(
            r["engine"], {"sustained": None, "failed": None, "producer_short": None})
        if r["sustained"]:
            best["sustained"] = max(best["sustained"] or 0, r["rate"])
        elif r["sustained"] is False:
            best["failed"] = min(best["failed"] or r["rate"], r["rate"])
        else:
            best["producer_short"] = min(best["producer_short"] or r["rate"], r["rate"])
    p99 = []
    for guarantee in sorted({r["guarantee"] for r in steady}):
        by = {(r["engine"], r["rate"]): r for r in steady if r["guarantee"] == guarantee and r["sustained"]}
        for rate in sorted({rate for _, rate in by}):
            if ("java", rate) in by and ("python", rate) in by:
                python, java = by["python", rate]["p99_ms"], by["java", rate]["p99_ms"]
                p99.append({"guarantee": guarantee, "rate": rate, "python_p99_ms": python, "java_p99_ms": java,
                            "target_met": python <= java})
    return {"highest_sustained": highest, "p99_where_both_sustain": p99}


def print_tables(results: list[dict], figures: dict[str, Any]) -> None:
    print(f"\n{'guarantee':<16} {'rate':>6} {'engine':<14} {'in/s':>6} {'e2e/s':>6} {'p50':>6} {'p99':>6} "
          f"{'p99.9':>6} {'max':>6} (ms) CPU s  sustained")
    for r in results:
        if r["event"] is None:
            verdict = {True: "yes", False: "NO", None: "producer short"}[r["sustained"]]
            print(f"{r['guarantee']:<16} {r['rate']:>6} {NAMES[r['engine']]:<14} {r.get('input_rate', '-'):>6} "
                  f"{r.get('end_to_end_rate', '-'):>6} {r.get('p50_ms', '-'):>6} {r.get('p99_ms', '-'):>6} "
                  f"{r.get('p999_ms', '-'):>6} {r.get('max_ms', '-'):>6}      {r['cpu_s']:>5}  {verdict} "
                  f"{r['reason']}")
    for guarantee, engines in figures["highest_sustained"].items():
        for engine, best in engines.items():
            above = (f"failed at {best['failed']:,}" if best["failed"] else
                     f"producer short at {best['producer_short']:,}" if best["producer_short"] else "not bounded")
            print(f"{guarantee}: {NAMES[engine]} sustains {best['sustained'] or 0:,} records/s per instance ({above})")
    for row in figures["p99_where_both_sustain"]:
        print(f"{row['guarantee']} at {row['rate']:,}/s: p99 this engine {row['python_p99_ms']} ms, Kafka Streams "
              f"{row['java_p99_ms']} ms: {'met' if row['target_met'] else 'NOT met'}")
    events = [r for r in results if r["event"]]
    if events:
        print(f"\n{'guarantee':<16} {'event':<10} {'engine':<14} {'gap before':>10} {'p99':>6} {'max':>6} | "
              f"{'gap after':>9} {'p99':>6} {'max':>6} (ms)")
        for r in events:
            b, a = r["before"], r["after"]
            print(f"{r['guarantee']:<16} {r['event']:<10} {NAMES[r['engine']]:<14} {b['longest_gap_ms']:>10} "
                  f"{b.get('p99_ms', '-'):>6} {b.get('max_ms', '-'):>6} | {a['longest_gap_ms']:>9} "
                  f"{a.get('p99_ms', '-'):>6} {a.get('max_ms', '-'):>6}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,5000,10000", help="records per second, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each rate is produced")
    parser.add_argument("--guarantee", action="append", choices=sorted(SETTINGS),
                        help="may be given twice (default: both)")
    parser.add_argument("--engines", default="java,python", type=parse_engines, help="comma-separated: java, python")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--max-rate", type=int, default=20_000, help="the search for the highest sustained rate "
                        "goes no higher (records/s); 0: no search")
    parser.add_argument("--search-steps", type=int, default=2, help="runs per engine and guarantee in the search")
    parser.add_argument("--events", default=",".join(EVENTS), help="comma-separated: rebalance, restore; '' for none")
    parser.add_argument("--event-rate", type=int, default=1000, help="records/s of the event runs")
    parser.add_argument("--event-window-s", type=float, default=10.0,
                        help="the inputs of this many seconds after an event make its window")
    parser.add_argument("--java-dynamic-members", action="store_true",
                        help="Kafka Streams instances without group.instance.id (its default; module docstring)")
    parser.add_argument("--json", type=Path, help="also write the last line's object here (docs/pictures/latency.py)")
    args = parser.parse_args()
    args.rates = sorted({int(r) for r in args.rates.split(",") if r.strip()})
    args.events = [e.strip() for e in args.events.split(",") if e.strip()]
    if not args.rates or args.rates[0] < 20 or args.event_rate < 20:
        parser.error(f"--rates and --event-rate must be >= 20 records/s, got {args.rates} and {args.event_rate}")
    if sorted(set(args.events) - set(EVENTS)):
        parser.error(f"--events must name rebalance and/or restore, got {','.join(args.events)!r}")
    if args.seconds < 4 or args.search_steps < 0 or args.max_rate < 0:
        parser.error(f"--seconds must be >= 4, --search-steps and --max-rate >= 0; got {args.seconds}, "
                     f"{args.search_steps}, {args.max_rate}")
    return args


def main() -> int:
    args = parse_args()
    machine = f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    command = " ".join(["bench/latency.py", *sys.argv[1:]])
    load_at_start = os.getloadavg()[0]
    print(f"machine: {machine}; load average {load_at_start:.1f}; command: {command}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    java = build_java() if "java" in args.engines else None
    stamp = time.strftime("%H%M%S")
    results: list[dict] = []
    agree = True

    def run(engine: str, guarantee: str, rate: int, event: str | None) -> dict:
        result = run_engine(engine, java, bootstrap, admin, guarantee, rate, event, args, work, stamp)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k not in ("distribution", "output_topic")}), flush=True)
        return result

    def compare(runs: list[dict]) -> None:
        """The same keys in the same order went to each engine: their last counts must agree."""
        nonlocal agree
        counts = {json.dumps(last_counts(bootstrap, r["output_topic"]), sort_keys=True) for r in runs}
        agree = agree and len(counts) <= 1

    with LocalKafkaBroker(work / "kafka") as broker:
        bootstrap = broker.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            for guarantee in args.guarantee or sorted(SETTINGS):
                failed: dict[str, int] = {}  # engine -> the lowest rate it did not sustain
                best: dict[str, int] = {}  # engine -> the highest rate it sustained
                short: set[str] = set()  # engines whose producer fell short: a higher rate tells nothing
                for rate in args.rates:
                    runs = []
                    for engine in (e for e in args.engines if e not in failed and e not in short):
                        runs.append(run(engine, guarantee, rate, None))
                        if runs[-1]["sustained"]:
                            best[engine] = rate
                        elif runs[-1]["sustained"] is False:
                            failed[engine] = rate
                        else:
                            short.add(engine)
                    compare(runs)
                for engine in (e for e in args.engines if args.max_rate and e not in short):
                    for _ in range(args.search_steps):
                        rate_to_try = next_rate(best[engine], failed.get(engine), args.max_rate) \
                            if engine in best else None
                        if rate_to_try is None:
                            break
                        verdict = run(engine, guarantee, rate_to_try, None)["sustained"]
                        if verdict is None:
                            break
                        if verdict:
                            best[engine] = rate_to_try
                        else:
                            failed[engine] = rate_to_try
                for event in args.events:
                    compare([run(engine, guarantee, args.event_rate, event) for engine in args.engines])
        finally:
            admin.close()
    shutil.rmtree(work, ignore_errors=True)
    for r in results:
        r.pop("output_topic")
    figures = summary(results)
    print_tables(results, figures)
    load = [round(load_at_start, 1), round(os.getloadavg()[0], 1)]
    print(f"outputs agree: {agree}; load average {load[0]} at the start, {load[1]} at the end (a machine shared "
          f"with other work: wall-clock latencies move with its load)")
    line = {"load_average_start_end": load, "machine": machine,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": command,
            "seconds": args.seconds, "users": args.users, "event_window_s": args.event_window_s,
            "java_static_members": not args.java_dynamic_members,
            "results": results, **figures, "outputs_agree": agree}
    if args.json:
        args.json.write_text(json.dumps(line, indent=1) + "\n")
    print(json.dumps(line))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
