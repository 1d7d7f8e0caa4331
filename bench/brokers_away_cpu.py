"""CPU an instance spends while its only broker is away: killed (connections refused) or frozen
(SIGSTOP: connections accepted, nothing answered, as in a long pause or behind a partition).

One instance process per guarantee (the counting topology of tests/integration/topologies.py,
4 partitions) on a local broker processes 100 records; then the broker is killed or frozen
and each instance's process CPU is printed per 10 s, its total last, as one JSON object. An
instance waiting for brokers should cost 1 to 3 CPU-seconds a minute (docs/runbook.md); a
client that spins shows here as seconds per 10 s.

    python -m bench.brokers_away_cpu [--away frozen|killed] [--seconds 120] [--after 2]
        [--guarantees at_least_once,exactly_once_v2]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from bench.emit_final import cpu_model
from tools.instances import InstanceProcess
from tools.kafka.broker import LocalKafkaBroker
from tools.kafka.topics import create_topics, produce
from tools.local_processes import process_cpu_seconds
from tools.waits import wait_until

TOPOLOGY = "tests.integration.topologies:configured_counts"
PARTITIONS = 4
RECORDS = 100
SAMPLE_S = 10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--away", choices=["frozen", "killed"], default="frozen")
    parser.add_argument("--seconds", type=int, default=120, help="how long the CPU is measured")
    parser.add_argument("--after", type=float, default=2.0, help="seconds from the broker going away to the start")
    parser.add_argument("--guarantees", default="at_least_once,exactly_once_v2")
    args = parser.parse_args()
    print(f"{cpu_model()}, {os.cpu_count()} cores, {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; "
          f"broker {args.away}, CPU per {SAMPLE_S} s over {args.seconds} s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="brokers-away-"))
    broker = LocalKafkaBroker(work_dir=work / "broker").start()
    instances: dict[str, InstanceProcess] = {}
    try:
        for guarantee in args.guarantees.split(","):
            source, sink = f"{guarantee}-in", f"{guarantee}-out"
            create_topics(broker.bootstrap_servers, {source: PARTITIONS, sink: PARTITIONS})
            instances[guarantee] = InstanceProcess(TOPOLOGY, {
                "application_id": guarantee, "bootstrap_servers": broker.bootstrap_servers,
                "state_dir": str(work / guarantee), "instance_id": guarantee, "processing_guarantee": guarantee,
                "app_configs": {"input": source, "output": sink}}, work, guarantee).start()
            produce(broker.bootstrap_servers, source, [(f"k{n}", json.dumps({"n": n})) for n in range(RECORDS)])
        for name, instance in instances.items():
            wait_until(lambda i=instance: (i.check_alive(), "REBALANCING -> RUNNING" in i.log_path.read_text())[1],
                       120, f"the {name} instance to run", instance.log_tail)
        time.sleep(5)  # the records processed and committed
        os.kill(broker.process.pid, signal.SIGSTOP if args.away == "frozen" else signal.SIGKILL)
        time.sleep(args.after)
        series: dict[str, list[float]] = {name: [] for name in instances}
        last = {name: process_cpu_seconds(i.process.pid) for name, i in instances.items()}
        for _ in range(args.seconds // SAMPLE_S):
            time.sleep(SAMPLE_S)
            for name, instance in instances.items():
                instance.check_alive()
                now = process_cpu_seconds(instance.process.pid)
                series[name].append(round(now - last[name], 2))
                last[name] = now
        for name, values in series.items():
            print(f"{name}: {sum(values):.2f} CPU-s in {len(values) * SAMPLE_S} s; per {SAMPLE_S} s: "
                  f"{', '.join(f'{v:.2f}' for v in values)}", flush=True)
        print(json.dumps({"away": args.away, "after_s": args.after, "cpu_s_per_10_s": series}))
    finally:
        for instance in instances.values():
            instance.kill()
        if args.away == "frozen":
            os.kill(broker.process.pid, signal.SIGCONT)
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
