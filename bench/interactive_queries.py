"""Benchmark: interactive query latency on the local broker (docs/interactive-queries.md).

Two instances of a counting application (exactly-once, one standby each, 4 partitions) in
this process, with input flowing at a steady rate. Then, one query at a time:
  in-process key queries at the key's owner (``KafkaStreams.query``),
  remote key queries over the query topics, one-off (``query_application``: its own
  connections each time) and over a kept ``QueryClient``,
  remote range pages of 100 records over every partition (``QueryClient``).
The load a query puts on an instance is one read per stream thread between two records;
the input rate processed with and without a query loop running beside it shows it.

Prints progress, then as its last line one JSON object with, per kind of query, the
latency p50/p99/max in ms, and the records/s processed without and with queries.

    python bench/interactive_queries.py [--queries 300] [--keys 1000] [--rate 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from kafka import KafkaProducer

from airflow_stateful_provider.streams import (
    KafkaStreams,
    KafkaStreamsState,
    KeyQuery,
    Processor,
    QueryClient,
    RangeQuery,
    StateQueryRequest,
    Stores,
    StreamsConfig,
    Topology,
    query_application,
)
from tools.kafka.broker import LocalKafkaBroker
from tools.kafka.topics import committed_offsets, create_topics, produce

PARTITIONS = 4
APP = "bench-iq"
TOPIC = "bench-iq-in"


class _Count(Processor):
    def init(self, context):
        self.counts = context.get_state_store("counts")

    def process(self, record):
        self.counts.put(record.key, (self.counts.get(record.key) or 0) + 1)


def _topology() -> Topology:
    topology = Topology().add_source("in", TOPIC, key_serde="string", value_serde="string")
    topology.add_processor("count", _Count, "in")
    topology.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string",
                                                            "int64"), "count")
    return topology


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 1),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1),
            "max_ms": round(ordered[-1] * 1000, 1), "queries": len(ordered)}


def _processed(bootstrap: str) -> int:
    return sum(committed_offsets(bootstrap, APP, TOPIC).values())


def _rate(bootstrap: str, seconds: float) -> float:
    before, started = _processed(bootstrap), time.monotonic()
    time.sleep(seconds)
    return (_processed(bootstrap) - before) / (time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300, help="queries of each kind")
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--rate", type=int, default=2_000, help="input records per second while measuring")
    args = parser.parse_args()
    keys = [f"user-{n:05d}" for n in range(args.keys)]
    work = Path(tempfile.mkdtemp(prefix="bench-iq-"))
    with LocalKafkaBroker(work / "kafka") as broker:
        bootstrap = broker.bootstrap_servers
        create_topics(bootstrap, {TOPIC: PARTITIONS})
        produce(bootstrap, TOPIC, [(k, "1") for k in keys])
        instances = {name: KafkaStreams(_topology(), StreamsConfig(
            application_id=APP, bootstrap_servers=bootstrap, state_dir=str(work / name), instance_id=name,
            processing_guarantee="exactly_once_v2", num_standby_replicas=1, status_interval_ms=500))
            for name in ("iq-0", "iq-1")}
        for streams in instances.values():
            streams.start()
        for streams in instances.values():
            streams.wait_for_state(KafkaStreamsState.RUNNING, timeout=120)
        stop = threading.Event()

        def feed() -> None:
            producer, n = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5), 0
            while not stop.is_set():
                started = time.monotonic()
                for i in range(args.rate // 10):
                    producer.send(TOPIC, key=keys[(n + i) % len(keys)].encode(), value=b"1")
                producer.flush()
                n += args.rate // 10
                stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))
            producer.close()

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        time.sleep(3)
        idle_rps = _rate(bootstrap, 10)
        print(f"processing {idle_rps:,.0f} records/s without queries", flush=True)
        owners = {key: instances[instances["iq-0"].query_metadata_for_key("counts", key).active_instance]
                  for key in keys[:50]}
        results: dict[str, list[float]] = {"in_process_key": [], "remote_key_one_off": [], "remote_key_client": [],
                                           "remote_range_page": []}
        client = QueryClient(bootstrap, APP)
        busy_rps: list[float] = []
        measuring = threading.Event()

        def measure_load() -> None:
            while not measuring.is_set():
                busy_rps.append(_rate(bootstrap, 5))

        load = threading.Thread(target=measure_load, daemon=True)
        load.start()
        for i in range(args.queries):
            key = keys[i % 50]
            request = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(key))
            started = time.monotonic()
            owners[key].query(request).value()
            results["in_process_key"].append(time.monotonic() - started)
            started = time.monotonic()
            query_application(bootstrap, APP, request).value()
            results["remote_key_one_off"].append(time.monotonic() - started)
            started = time.monotonic()
            client.query(request).value()
            results["remote_key_client"].append(time.monotonic() - started)
            started = time.monotonic()
            client.query(StateQueryRequest.in_store("counts").with_query(
                RangeQuery.with_no_bounds().with_limit(100))).records()
            results["remote_range_page"].append(time.monotonic() - started)
        client.close()
        measuring.set()
        load.join(10)
        stop.set()
        feeder.join(30)
        for streams in instances.values():
            streams.close(timeout=60)
    latency = {kind: _percentiles(samples) for kind, samples in results.items()}
    for kind, figures in latency.items():
        print(f"{kind}: p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms, max {figures['max_ms']} ms",
              flush=True)
    with_queries = statistics.mean(busy_rps) if busy_rps else None
    print(f"processing {with_queries or 0:,.0f} records/s with queries running", flush=True)
    print(json.dumps({"latency": latency, "processed_rps_without_queries": round(idle_rps),
                      "processed_rps_with_queries": None if with_queries is None else round(with_queries),
                      "input_rps": args.rate, "keys": args.keys,
                      "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
