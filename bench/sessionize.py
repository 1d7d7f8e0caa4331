"""Benchmark: session windows on a real broker, one instance (issue 4).

1M click events over 10k users (gap 5 min, synthetic event time ending now) through a
session-count topology, then a fresh state directory restores the session store from its
changelog, and plain kafka-python reads the same changelog for comparison (with its own
record decoding, and with the engine's).

Prints progress, then as its last line one JSON object:
  process_rps     input records / (first poll with records -> last commit)
  restore_rps     changelog records restored / restoration time (listener start -> end),
                  best of three restorations into fresh state directories
  raw_fetch_rps   changelog records / time for a bare KafkaConsumer to read them all,
                  best of three
  restore_vs_raw  restore_rps / raw_fetch_rps
  engine_fetch_rps         the same bare consumer with the engine's one-pass batch decoding
                           (what restoration's own fetching costs), best of three
  restore_vs_engine_fetch  restore_rps / engine_fetch_rps: the share of restoration spent
                           fetching, the rest being store writes and bookkeeping

    python bench/sessionize.py [--events 1000000] [--users 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreams, KafkaStreamsState
from airflow_stateful_provider.streams.kafka.batch_decoding import decode_batches_at_once
from airflow_stateful_provider.streams.kafka.net_client import engine_net_client
from airflow_stateful_provider.streams.windows import SessionWindows
from tools.kafka.broker import LocalKafkaBroker
from tools.kafka.topics import produce, read_committed_offsets

GAP_MS = 300_000
PARTITIONS = 4


def topology(source: str = "bench-clicks", sink: str = "bench-session-counts"):
    builder = StreamsBuilder()
    (builder.stream(source, Consumed.with_("string", "bytes"))
     .group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(GAP_MS))
     .count(Materialized.as_("sessions"))
     .to_stream()
     .map(lambda windowed, count: (windowed.key, count))
     .to(sink, Produced.with_("string", "int64")))
    return builder.build()


def configured_topology(config: StreamsConfig):
    """The same topology for an instance process; topics from ``app_configs`` ("input", "output")."""
    return topology(config.app_configs["input"], config.app_configs["output"])


def produce_events(bootstrap: str, events: int, users: int, topic: str = "bench-clicks") -> None:
    """Per user a timeline (most steps extend the current session, one in ten starts a new
    one), all merged in timestamp order and ending now."""
    rng = random.Random(1)
    per_user = events // users
    timeline = []
    for u in range(users):
        ts = rng.randrange(0, 3_600_000)
        for _ in range(per_user):
            ts += rng.randrange(1_000, 60_000) if rng.random() < 0.9 else rng.randrange(GAP_MS + 1, 2 * GAP_MS)
            timeline.append((ts, u))
    timeline.sort()
    shift = int(time.time() * 1000) - timeline[-1][0]
    keys = [f"user-{u:05d}".encode() for u in range(users)]
    produce(bootstrap, topic, ((keys[u], b"c", ts + shift) for ts, u in timeline), linger_ms=50,
            batch_size=1024 * 1024, acks=1)


def process_all(streams: KafkaStreams, admin: KafkaAdminClient, source: str, events: int) -> float:
    """Start ``streams`` and wait until its group committed ``events`` records of ``source``;
    returns the processing seconds (first poll with records -> last commit) of its thread."""
    streams.start()
    while sum(read_committed_offsets(admin, streams.config.application_id, source).values()) < events:
        if streams.state in (KafkaStreamsState.ERROR, KafkaStreamsState.PENDING_ERROR):
            raise SystemExit(f"{streams.config.application_id}: the instance failed")
        time.sleep(0.5)
    thread = streams.threads[0]
    return thread.last_committed_at - thread.first_records_polled_at


class RestoreTimer:
    def __init__(self) -> None:
        self.started = self.ended = None
        self.restored = 0

    def on_restore_start(self, partition, store_name, start_offset, end_offset):
        self.started = self.started or time.monotonic()

    def on_batch_restored(self, partition, store_name, batch_end_offset, num_restored):
        self.restored += num_restored

    def on_restore_end(self, partition, store_name, total_restored):
        self.ended = time.monotonic()

    def on_restore_suspended(self, partition, store_name, total_restored):
        pass


def fetch_all(bootstrap: str, topic: str, engine_decoding: bool) -> tuple[int, float]:
    """A bare consumer reads ``topic`` from the beginning to its end: (records, seconds). With
    ``engine_decoding`` it reads as the engine's consumers do: the engine's network client
    (whose 256 KiB socket reads stay installed in the process: fetch without first) and batch
    decoding."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=10_000,
                             **({"kafka_client": engine_net_client} if engine_decoding else {}))
    if engine_decoding:
        decode_batches_at_once(consumer)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    fetched, t0 = 0, time.monotonic()
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        fetched += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
    seconds = time.monotonic() - t0
    consumer.close()
    return fetched, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-sessionize-"))
    with LocalKafkaBroker(work / "kafka") as broker:
        bootstrap = broker.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic("bench-clicks", PARTITIONS, 1), NewTopic("bench-session-counts", PARTITIONS, 1)])
        t0 = time.monotonic()
        produce_events(bootstrap, args.events, args.users)
        print(f"produced {args.events} events in {time.monotonic() - t0:.1f}s", flush=True)

        config = StreamsConfig(application_id="bench-sessionize", bootstrap_servers=bootstrap,
                               state_dir=str(work / "state-a"), commit_interval_ms=5_000)
        streams = KafkaStreams(topology(), config)
        expected = args.events // args.users * args.users
        process_seconds = process_all(streams, admin, "bench-clicks", expected)
        streams.close(timeout=60)
        process_rps = expected / process_seconds
        print(f"processed {expected} events in {process_seconds:.1f}s: {process_rps:,.0f} records/s", flush=True)

        changelog = "bench-sessionize-sessions-changelog"
        # Restoring and fetching ~150k records take about a second each: best of three of
        # each, so that one noisy second on a shared machine does not decide the ratio.
        restore_rps, raw_fetch_rps, engine_fetch_rps = 0.0, 0.0, 0.0
        for attempt in range(3):
            timer = RestoreTimer()
            restorer = KafkaStreams(topology(), config.with_overrides(state_dir=str(work / f"state-b{attempt}")))
            restorer.set_global_state_restore_listener(timer)
            restorer.start()
            restorer.wait_for_state(KafkaStreamsState.RUNNING, timeout=600)
            restorer.close(timeout=60)
            restore_seconds = timer.ended - timer.started
            restore_rps = max(restore_rps, timer.restored / restore_seconds)
            print(f"restored {timer.restored} changelog records in {restore_seconds:.2f}s: "
                  f"{timer.restored / restore_seconds:,.0f} records/s", flush=True)

            for engine_decoding in (False, True):
                fetched, fetch_seconds = fetch_all(bootstrap, changelog, engine_decoding)
                rate = fetched / fetch_seconds
                if engine_decoding:
                    engine_fetch_rps = max(engine_fetch_rps, rate)
                else:
                    raw_fetch_rps = max(raw_fetch_rps, rate)
                print(f"{'engine' if engine_decoding else 'raw'} fetch of {fetched} changelog records in "
                      f"{fetch_seconds:.2f}s: {rate:,.0f} records/s", flush=True)
        admin.close()

    result = {"events": args.events, "users": args.users, "process_rps": round(process_rps),
              "restore_rps": round(restore_rps), "raw_fetch_rps": round(raw_fetch_rps),
              "restore_vs_raw": round(restore_rps / raw_fetch_rps, 3),
              "engine_fetch_rps": round(engine_fetch_rps),
              "restore_vs_engine_fetch": round(restore_rps / engine_fetch_rps, 3),
              "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
