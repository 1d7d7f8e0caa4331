"""Soak: exactly-once through broker outages, run after run (issue 33).

An in-process instance counts per key (a RocksDB key-value store, every new count sent to the
output topic) while every broker of a local cluster (tools/kafka/cluster.py; one broker by
default) is stopped for each given duration and started again. Each run checks the oracle:
every key's read_committed output is exactly 1..n and the instance never left RUNNING or
REBALANCING; it prints the pause (from the brokers being back to the next committed input)
and, as its last line, one JSON object with every run.

    python -m bench.broker_outage_soak [--runs 5] [--outages 30,60] [--nodes 1]
        [--records 20000] [--keys 50] [--guarantee exactly_once_v2]

It exits 1 when any run breaks the oracle. Run a second `make test` beside it for a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from airflow_stateful_provider.streams import (
    KafkaStreams,
    KafkaStreamsState,
    Processor,
    Stores,
    StreamsConfig,
    Topology,
)
from bench.emit_final import cpu_model
from tools.kafka.cluster import LocalKafkaCluster
from tools.kafka.topics import committed_offsets, create_topics, produce, read_all
from tools.waits import wait_progressing

PARTITIONS = 4
STORE = "counts"
#: Processing must move again within this long of the brokers being back (issue 33).
RESUME_BOUND_S = 60


class Count(Processor):
    """Counts per key and sends every new count."""

    def init(self, context):
        self.context = context
        self.counts = context.get_state_store(STORE)

    def process(self, record):
        count = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, count)
        self.context.forward(record.with_value(count))


def counting(source: str, sink: str) -> Topology:
    topology = Topology()
    topology.add_source("source", source, key_serde="string", value_serde="string")
    topology.add_processor("count", Count, "source")
    topology.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store(STORE), "string",
                                                            "int64"), "count")
    topology.add_sink("sink", sink, "count", key_serde="string", value_serde="int64")
    return topology


def one_run(cluster: LocalKafkaCluster, outage_s: float, args: argparse.Namespace, work: Path) -> dict:
    name = uuid.uuid4().hex[:8]
    source, sink, app = f"soak-in-{name}", f"soak-out-{name}", f"soak-{name}"
    servers = cluster.bootstrap_servers
    create_topics(servers, {source: PARTITIONS, sink: PARTITIONS}, replication_factor=cluster.replication_factor)
    produce(servers, source, [(f"k{i % args.keys:03d}", str(i)) for i in range(args.records)], linger_ms=20)
    config = StreamsConfig(application_id=app, bootstrap_servers=servers, state_dir=str(work / name),
                           processing_guarantee=args.guarantee, replication_factor=cluster.replication_factor)
    streams = KafkaStreams(counting(source, sink), config)
    states: set[str] = set()
    streams.set_state_listener(lambda new, old: states.add(new.value))
    errors: list[BaseException] = []
    streams.set_uncaught_exception_handler(errors.append)

    def committed() -> int:
        return sum(committed_offsets(servers, app, source).values())

    streams.start()
    try:
        wait_progressing(lambda: committed() >= args.records // 4, committed, "a quarter of the input committed",
                         measure="committed input offsets")
        for node_id in cluster.nodes:
            cluster.stop_node(node_id)
        print(f"  brokers stopped for {outage_s:g} s ...", flush=True)
        time.sleep(outage_s)
        cluster.start_nodes()
        back = time.monotonic()
        at_return = committed()
        wait_progressing(lambda: committed() > at_return, committed, "the first commit after the brokers returned",
                         measure="committed input offsets", stall=RESUME_BOUND_S)
        pause_s = time.monotonic() - back
        wait_progressing(lambda: committed() >= args.records, committed, "every record committed",
                         measure="committed input offsets", context=lambda: f"state {streams.state}")
    finally:
        closed = streams.close(timeout=60)
    outputs: dict[str, list[int]] = defaultdict(list)
    for record in read_all(servers, sink):
        outputs[record.key.decode()].append(int.from_bytes(record.value, "big", signed=True))
    expected = defaultdict(int)
    for i in range(args.records):
        expected[f"k{i % args.keys:03d}"] += 1
    wrong = sorted(k for k, n in expected.items() if outputs.get(k) != list(range(1, n + 1)))
    failed = bool(wrong) or bool(errors) or not closed or KafkaStreamsState.ERROR.value in states
    return {"outage_s": outage_s, "resumed_after_s": round(pause_s, 1), "exact": not wrong,
            "keys_wrong": wrong[:5], "errors": [repr(e) for e in errors], "closed": closed,
            "states": sorted(states), "ok": not failed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--outages", default="30,60", help="seconds the brokers stay down, comma-separated")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--guarantee", default="exactly_once_v2", choices=["exactly_once_v2", "at_least_once"])
    args = parser.parse_args()
    outages = [float(x) for x in args.outages.split(",") if x.strip()]
    machine = f"{cpu_model()}, {os.cpu_count()} cores"
    print(f"machine: {machine}; {args.nodes} broker(s), {args.guarantee}, {args.records:,} records per run",
          flush=True)
    work = Path(tempfile.mkdtemp(prefix="outage-soak-"))
    results = []
    try:
        with LocalKafkaCluster(work / "kafka", nodes=args.nodes) as cluster:
            for outage_s in outages:
                for run in range(1, args.runs + 1):
                    print(f"outage {outage_s:g} s, run {run}/{args.runs}", flush=True)
                    result = one_run(cluster, outage_s, args, work)
                    results.append(result)
                    print(f"  {'ok' if result['ok'] else 'FAILED'}: resumed {result['resumed_after_s']} s after the "
                          f"brokers were back, output {'exact' if result['exact'] else 'WRONG'}, states "
                          f"{result['states']}{', errors ' + str(result['errors']) if result['errors'] else ''}",
                          flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for outage_s in outages:
        runs = [r for r in results if r["outage_s"] == outage_s]
        print(f"outage {outage_s:g} s: {sum(r['ok'] for r in runs)} of {len(runs)} runs exact, longest resume "
              f"{max(r['resumed_after_s'] for r in runs)} s", flush=True)
    print(json.dumps({"machine": machine, "date": time.strftime("%Y-%m-%d"), "nodes": args.nodes,
                      "guarantee": args.guarantee, "runs": results}))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
