"""Emit-on-window-close at ``windowed_aggregation_emit_interval_ms=0``: does doubling the
clicks double the time, or quadruple it?

    .venv/bin/python bench/emit_final.py [--clicks 20000] [--repeat 3] [--scan]
                                         [--store-type rocksdb|in_memory]

Runs the example pipeline's session aggregation (airflow_stateful_provider/examples, the
crash tests' settings: 10 min gap, 2 min grace, a day of retention) in the
TopologyTestDriver on N and 2N generated clicks (examples/generator.py; users grow with
the clicks, so each user's timeline stays alike) and prints the time of each and the
ratio. The driver commits every 1,000 records, as a commit interval would, not after each
record: a commit flushes RocksDB, which would dominate the figures.
At interval 0 the aggregation asks the store for the sessions that closed after nearly
every click: with the store's time index (state/session/index.py) that costs the sessions
forwarded, so the target is a ratio of at most 2.2. ``--scan`` also runs the RocksDB store
without the index (the segment scan it replaced) for comparison. Each figure is the best of
``--repeat`` runs, in CPU seconds of this process (the driver runs in it; the machine is
shared, so wall-clock seconds, printed too, are noisier). Prints a progress bar per run, the
figures, and as its last line one JSON object.

The process runs with the garbage collector's thresholds an instance sets
(instance/garbage_collection.py), as the aggregation runs in production. With CPython's
defaults the full collections traverse every record the driver keeps (it keeps all it
produced, changelogs included), which grows with the input: the ratio was 2.15-2.24 that
way, 2.06-2.08 with the instance's thresholds and 2.02 with no collector at all (AMD EPYC,
2026-11-30).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import shlex
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from airflow_stateful_provider.examples.clicks_and_payments import (
    SESSIONS_STORE,
    SESSIONS_TOPIC,
    build_topology,
)
from airflow_stateful_provider.examples.generator import CLICK, generate
from airflow_stateful_provider.streams import Serdes, SessionWindowedSerde, StreamsConfig
from airflow_stateful_provider.streams.instance.garbage_collection import raise_gc_thresholds
from airflow_stateful_provider.streams.testing import TopologyTestDriver

GAP_MS, GRACE_MS = 10 * 60_000, 2 * 60_000  # tests/integration/crash_harness.py's Workload
CLICKS_PER_USER = 67  # 40k clicks over 600 users, as in the crash tests
TARGET_RATIO = 2.2
COMMIT_EVERY = 1_000


class RarelyCommittingDriver(TopologyTestDriver):
    """The driver commits after each record (as Kafka's does); this one every COMMIT_EVERY."""

    _since_commit = 0

    def _commit(self, task) -> None:  # type: ignore[no-untyped-def]
        self._since_commit += 1
        if self._since_commit >= COMMIT_EVERY:
            self._since_commit = 0
            super()._commit(task)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Progress:
    """A bar redrawn at most once a second: done/total, rate, ETA."""

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
        print(f"\r  {self.what}: [{bar:<30}] {done:,}/{self.total:,} {rate:,.0f}/s ETA {eta:,.0f}s ", end="",
              flush=True)

    def done(self) -> None:
        self.update(self.total, force=True)
        print(flush=True)


def clicks(count: int) -> list[tuple[str, dict, int]]:
    users = max(1, count // CLICKS_PER_USER)
    records = generate(seed=4242, users=users, clicks=count, payments=0, start_ms=1_700_000_000_000,
                       session_gap_ms=GAP_MS, session_grace_ms=GRACE_MS)
    return [(r.key, r.value, r.timestamp) for r in records if r.kind == CLICK]


def run(records: list[tuple[str, dict, int]], store_type: str, time_index: bool,
        label: str) -> tuple[float, float, int]:
    """CPU and wall-clock seconds to pipe every click through the aggregation (driver set-up
    and close left out), and the number of sessions forwarded."""
    config = StreamsConfig(application_id="bench-emit-final", bootstrap_servers="unused:9092",
                           windowed_aggregation_emit_interval_ms=0,
                           app_configs={"session_gap_ms": GAP_MS, "session_grace_ms": GRACE_MS})
    topology = build_topology(config)
    topology.store_builder(SESSIONS_STORE).time_index = time_index
    with RarelyCommittingDriver(topology, config, store_type=store_type) as driver:
        pipe = driver.create_input_topic(config.app_configs.get("clicks_topic", "clicks"), Serdes.string(),
                                         Serdes.json()).pipe_input
        sessions = driver.create_output_topic(SESSIONS_TOPIC, SessionWindowedSerde(Serdes.string()), Serdes.json())
        progress = Progress(label, len(records))
        cpu_started, wall_started = time.process_time(), time.perf_counter()
        for done, (key, value, timestamp) in enumerate(records):
            pipe(key, value, timestamp)
            if done % 500 == 0:
                progress.update(done)
        cpu, wall = time.process_time() - cpu_started, time.perf_counter() - wall_started
        progress.done()
        return cpu, wall, len(sessions.read_records_to_list())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clicks", type=int, default=20_000, help="N: runs on N and 2N clicks")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs per figure")
    parser.add_argument("--scan", action="store_true", help="also run the RocksDB store without the time index")
    parser.add_argument("--store-type", choices=("rocksdb", "in_memory"), default="rocksdb")
    args = parser.parse_args(argv)
    # the generator sends some clicks far too late on purpose: thousands of warnings otherwise
    logging.getLogger("airflow_stateful_provider.streams.dsl.dropped").setLevel(logging.ERROR)
    raise_gc_thresholds()  # an instance's (module docstring)

    print(f"emit-final bench, {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}\n"
          f"  command: {shlex.join([sys.executable, *sys.argv])}\n"
          f"  CPU: {cpu_model()}, {len(os.sched_getaffinity(0))} cores usable; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; Python {platform.python_version()}", flush=True)
    sizes = (args.clicks, 2 * args.clicks)
    inputs = {n: clicks(n) for n in sizes}
    variants = [("time index", args.store_type, True)]
    if args.scan and args.store_type == "rocksdb":
        variants.append(("segment scan", "rocksdb", False))
    result: dict[str, object] = {"clicks": list(sizes), "store_type": args.store_type, "repeat": args.repeat}
    for name, store_type, time_index in variants:
        cpu: dict[int, float] = {}
        wall: dict[int, float] = {}
        for n in sizes:
            for attempt in range(1, args.repeat + 1):
                cpu_s, wall_s, forwarded = run(inputs[n], store_type, time_index,
                                               f"{name}, {n:,} clicks, run {attempt}/{args.repeat}")
                cpu[n], wall[n] = min(cpu.get(n, cpu_s), cpu_s), min(wall.get(n, wall_s), wall_s)
            print(f"{name}: {len(inputs[n]):,} clicks (with a flush click per user) in {cpu[n]:.2f} CPU s "
                  f"({len(inputs[n]) / cpu[n]:,.0f} clicks per CPU s), {wall[n]:.2f} s wall clock; "
                  f"{forwarded:,} sessions forwarded", flush=True)
        ratio, wall_ratio = cpu[sizes[1]] / cpu[sizes[0]], wall[sizes[1]] / wall[sizes[0]]
        verdict = "meets" if ratio <= TARGET_RATIO else "misses"
        print(f"{name}: 2N/N time ratio {ratio:.2f} in CPU seconds ({verdict} the target <= {TARGET_RATIO}), "
              f"{wall_ratio:.2f} in wall-clock seconds", flush=True)
        key = "index" if time_index else "scan"
        result[f"{key}_cpu_seconds"] = [round(cpu[n], 3) for n in sizes]
        result[f"{key}_wall_seconds"] = [round(wall[n], 3) for n in sizes]
        result[f"{key}_ratio"] = round(ratio, 3)
        result[f"{key}_wall_ratio"] = round(wall_ratio, 3)
    result["machine"] = f"{cpu_model()}, {platform.machine()}, Python {platform.python_version()}"
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
