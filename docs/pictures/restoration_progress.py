"""Draws docs/pictures/restoration-progress.png from a real restoration: a local broker
(tools/kafka/broker.py), a key-value store's changelog filled with a different number of
records in each of its four partitions, and one instance starting on an empty state
directory. Its restore listener records, per task, the changelog offset restored so far
against the time since the instance started; the samples are kept next to the picture
(restoration-progress.json) so it can be redrawn without measuring again.

    .venv/bin/python docs/pictures/restoration_progress.py            # measure (about a minute), then draw
    .venv/bin/python docs/pictures/restoration_progress.py --redraw   # draw the kept samples

Needs Java and the broker jars (``make jars``) to measure, the docs extra (matplotlib) to draw.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

HERE = Path(__file__).resolve().parent
OUT = HERE / "restoration-progress.png"
SAMPLES = HERE / "restoration-progress.json"
#: Changelog records per partition (so per task): uneven, so the tasks finish one after another.
RECORDS = (400_000, 300_000, 200_000, 100_000)
APP = "restoration-picture"


def counts_topology(source: str):
    from airflow_stateful_provider.streams import Processor, Serdes, Stores, Topology

    class Count(Processor):
        def init(self, context):
            super().init(context)
            self.counts = context.get_state_store("counts")

        def process(self, record):
            self.counts.put(record.key, (self.counts.get(record.key) or 0) + 1)

    return (Topology()
            .add_source("events", source, key_serde=Serdes.string(), value_serde=Serdes.string())
            .add_processor("count", Count, "events")
            .add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"),
                                                            Serdes.string(), Serdes.int64()), "count"))


def fill(bootstrap: str, source: str, changelog: str) -> None:
    """The input topic, and the changelog as a previous run would have left it."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(source, len(RECORDS), 1),
                             NewTopic(changelog, len(RECORDS), 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=50, batch_size=1 << 20)
    one = (1).to_bytes(8, "big")
    try:
        for partition, count in enumerate(RECORDS):
            for i in range(count):
                producer.send(changelog, key=b"key-%d-%d" % (partition, i), value=one, partition=partition)
        producer.flush()
    finally:
        producer.close()


class Recorder:
    """A StateRestoreListener: (seconds since start, offsets restored) per task."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.samples: dict[str, list[tuple[float, int]]] = {}
        self.start_offsets: dict[str, int] = {}

    def _task(self, partition) -> str:
        return f"0_{partition.partition}"

    def on_restore_start(self, partition, store_name, start_offset, end_offset):
        with self.lock:
            self.start_offsets[self._task(partition)] = max(start_offset, 0)
            self.samples.setdefault(self._task(partition), []).append((time.monotonic() - self.started, 0))

    def on_batch_restored(self, partition, store_name, batch_end_offset, num_restored):
        task = self._task(partition)
        with self.lock:
            self.samples[task].append((time.monotonic() - self.started,
                                       batch_end_offset + 1 - self.start_offsets.get(task, 0)))

    def on_restore_end(self, partition, store_name, total_restored):
        with self.lock:
            self.samples[self._task(partition)].append((time.monotonic() - self.started, total_restored))

    def on_restore_suspended(self, partition, store_name, total_restored):
        pass


def measure() -> dict:
    from airflow_stateful_provider.streams import KafkaStreams, KafkaStreamsState, StreamsConfig
    from tools.kafka.broker import LocalKafkaBroker

    with tempfile.TemporaryDirectory(prefix="restoration-picture-") as work, \
            LocalKafkaBroker(Path(work) / "kafka") as broker:
        source, changelog = f"{APP}-events", f"{APP}-counts-changelog"
        print(f"filling {changelog} with {sum(RECORDS):,} records", file=sys.stderr)
        fill(broker.bootstrap_servers, source, changelog)
        config = StreamsConfig(application_id=APP, bootstrap_servers=broker.bootstrap_servers,
                               state_dir=os.path.join(work, "state"))
        streams = KafkaStreams(counts_topology(source), config)
        recorder = Recorder()
        streams.set_global_state_restore_listener(recorder)
        streams.start()
        try:
            streams.wait_for_state(KafkaStreamsState.RUNNING, timeout=600)
            took = time.monotonic() - recorder.started
        finally:
            streams.close(timeout=60)
    return {"records_per_task": dict(zip((f"0_{p}" for p in range(len(RECORDS))), RECORDS, strict=True)),
            "seconds_to_running": round(took, 2),
            "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
            "samples": {task: [[round(t, 3), n] for t, n in points]
                        for task, points in sorted(recorder.samples.items())}}


def draw(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8))
    for task, points in result["samples"].items():
        seconds, offsets = zip(*points, strict=True)
        ax.plot(seconds, offsets, marker=".", markersize=3, linewidth=1.6,
                label=f"task {task}: {result['records_per_task'][task]:,} records")
    ax.axvline(result["seconds_to_running"], color="#888888", linestyle="--", linewidth=1)
    ax.text(result["seconds_to_running"], ax.get_ylim()[1] * 0.97, " instance RUNNING", va="top", fontsize=9,
            color="#555555")
    ax.set_xlabel("seconds since the instance started")
    ax.set_ylabel("changelog offsets restored")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_title(f"Restoring four tasks of a key-value store from their changelogs on an empty state directory\n"
                 f"one stream thread, {result['machine']}, broker on the same host", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    fig.savefig(OUT, dpi=110, metadata={"Software": None})
    print(OUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redraw", action="store_true", help=f"draw {SAMPLES.name} without measuring")
    args = parser.parse_args()
    if args.redraw:
        result = json.loads(SAMPLES.read_text())
    else:
        result = measure()
        SAMPLES.write_text(json.dumps(result, indent=1) + "\n")
    draw(result)


if __name__ == "__main__":
    main()
