"""Benchmark: exactly-once against at-least-once on the sessionize workload (issue 14).

1. Throughput: the input of bench/sessionize.py (1M click events over 10k users, session
   windows with count, 4 partitions, one stream thread), each run a fresh application on
   the same broker and input, at-least-once and exactly-once at two commit intervals:
   5 s (as bench/sessionize.py) and 100 ms (exactly-once's default). Compare at equal
   intervals: the interval decides how much the record cache collapses, so how many
   changelog and output records are written, whatever the guarantee.
2. Restore after kill -9 under exactly-once: an instance process counts sessions, is killed
   with SIGKILL mid-stream, and a new process on the same state directory restores; with
   the transactional store buffer (the default) and without it (Kafka Streams' behaviour:
   the state is wiped and the whole changelog restored).

Prints progress, then as its last line one JSON object:
  runs                       per "<guarantee>@<commit interval ms>": records/s (input
                             records / (first poll with records -> last commit)) and the
                             CPU seconds of this process while it ran
  eos_vs_alos                {"5000": ratio, "100": ratio}: exactly-once records/s over
                             at-least-once records/s at the same commit interval
  eos_vs_alos_per_cpu_second the same in records per CPU-second
  restore_buffered / restore_unbuffered
                             {"restored": records, "seconds": restoration time,
                              "changelog": changelog records at the kill}

    python bench/exactly_once.py [--events 1000000] [--users 10000] [--restore-events 300000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from airflow_stateful_provider.streams import KafkaStreams, StreamsConfig
from bench.sessionize import PARTITIONS, process_all, produce_events, topology
from tools.instances import InstanceProcess
from tools.kafka.broker import LocalKafkaBroker
from tools.kafka.topics import read_committed_offsets
from tools.waits import wait_until

INPUT, OUTPUT = "bench-clicks", "bench-session-counts"
#: Commit intervals compared (ms): bench/sessionize.py's, and exactly-once's default.
INTERVALS_MS = (5_000, 100)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_throughput(bootstrap: str, admin: KafkaAdminClient, work: Path, guarantee: str, commit_ms: int,
                   events: int) -> dict:
    app = f"bench-{guarantee.replace('_', '-')}-{commit_ms}"
    config = StreamsConfig(application_id=app, bootstrap_servers=bootstrap, state_dir=str(work / app),
                           processing_guarantee=guarantee, instance_id=f"{app}-0", commit_interval_ms=commit_ms)
    streams = KafkaStreams(topology(), config)
    cpu0 = cpu_seconds()
    seconds = process_all(streams, admin, INPUT, events)
    cpu = cpu_seconds() - cpu0
    streams.close(timeout=60)
    rps = events / seconds
    print(f"{guarantee}: {events} events in {seconds:.1f}s: {rps:,.0f} records/s, {cpu:.1f} CPU s "
          f"(commit every {config.commit_interval_ms} ms)", flush=True)
    return {"rps": rps, "cpu": cpu}


def changelog_size(bootstrap: str, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return sum(consumer.end_offsets(tps).values())
    finally:
        consumer.close()


def run_restore(bootstrap: str, admin: KafkaAdminClient, work: Path, buffered: bool, events: int) -> dict:
    """Count sessions in an instance process, kill it with SIGKILL once 60 % of the input is
    committed, and time the restoration of the next process on the same state directory."""
    app = f"bench-restore-{'buffered' if buffered else 'unbuffered'}"
    admin.create_topics([NewTopic(f"{app}-in", PARTITIONS, 1), NewTopic(f"{app}-out", PARTITIONS, 1)])
    produce_events(bootstrap, events, events // 100, topic=f"{app}-in")
    config = {"application_id": app, "bootstrap_servers": bootstrap, "state_dir": str(work / app),
              "processing_guarantee": "exactly_once_v2", "transactional_state_stores": buffered,
              "instance_id": f"{app}-0", "app_configs": {"input": f"{app}-in", "output": f"{app}-out"}}
    topology_ref = "bench.sessionize:configured_topology"
    first = InstanceProcess(topology_ref, config, work, f"{app}-first").start()
    second = None
    try:
        wait_until(lambda: first.check_alive() or sum(read_committed_offsets(admin, app, f"{app}-in").values())
                   >= events * 0.6, 600, "60 % of the input committed", first.log_tail)
        first.kill()
        size = changelog_size(bootstrap, f"{app}-sessions-changelog")
        second = InstanceProcess(topology_ref, config, work, f"{app}-second").start()
        wait_until(lambda: second.check_alive() or any(e["event"] == "restore_end" for e in second.events())
                   and all(e["event"] != "restore_start" or any(
                       f["event"] == "restore_end" and f["partition"] == e["partition"] for f in second.events())
                       for e in second.events()), 600, "the restoration to end", second.log_tail)
        second.stop()
    finally:
        first.ensure_stopped()
        if second is not None:
            second.ensure_stopped()
    events_seen = second.events()
    starts = [e["at_ms"] for e in events_seen if e["event"] == "restore_start"]
    ends = [e["at_ms"] for e in events_seen if e["event"] == "restore_end"]
    restored = sum(e["total"] for e in events_seen if e["event"] == "restore_end")
    seconds = (max(ends) - min(starts)) / 1000 if starts else 0.0
    print(f"restore after kill -9, {'with' if buffered else 'without'} the transactional store buffer: "
          f"{restored:,} of {size:,} changelog records in {seconds:.2f}s", flush=True)
    return {"restored": restored, "seconds": round(seconds, 2), "changelog": size}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--restore-events", type=int, default=300_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-exactly-once-"))
    with LocalKafkaBroker(work / "kafka") as broker:
        bootstrap = broker.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(INPUT, PARTITIONS, 1), NewTopic(OUTPUT, PARTITIONS, 1)])
        t0 = time.monotonic()
        produce_events(bootstrap, args.events, args.users)
        print(f"produced {args.events} events in {time.monotonic() - t0:.1f}s", flush=True)
        expected = args.events // args.users * args.users
        runs = {f"{guarantee}@{commit_ms}": run_throughput(bootstrap, admin, work, guarantee, commit_ms, expected)
                for commit_ms in INTERVALS_MS for guarantee in ("at_least_once", "exactly_once_v2")}
        buffered = run_restore(bootstrap, admin, work, True, args.restore_events)
        unbuffered = run_restore(bootstrap, admin, work, False, args.restore_events)
        admin.close()
    ratios = {str(ms): round(runs[f"exactly_once_v2@{ms}"]["rps"] / runs[f"at_least_once@{ms}"]["rps"], 3)
              for ms in INTERVALS_MS}
    # per CPU-second: what the work costs, whatever else the machine runs meanwhile
    cpu_ratios = {str(ms): round(runs[f"at_least_once@{ms}"]["cpu"] / runs[f"exactly_once_v2@{ms}"]["cpu"], 3)
                  for ms in INTERVALS_MS}
    for ms in ratios:
        print(f"commit every {ms} ms: exactly-once / at-least-once = {ratios[ms]:.2f} in records/s, "
              f"{cpu_ratios[ms]:.2f} in records per CPU-second", flush=True)
    result = {"events": args.events, "users": args.users,
              "runs": {name: {"rps": round(run["rps"]), "cpu_s": round(run["cpu"], 1)} for name, run in runs.items()},
              "eos_vs_alos": ratios, "eos_vs_alos_per_cpu_second": cpu_ratios,
              "restore_buffered": buffered, "restore_unbuffered": unbuffered,
              "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
