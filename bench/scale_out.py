"""Benchmark: processing gaps during a scale-out (issue 5).

One instance (an OS process, the runner) loads 400k records over 400k keys into a RocksDB
key-value store of an application with 4 tasks (~100k changelog records per task). With a
steady input flow, a second instance joins (acceptable_recovery_lag 1000, probing rebalances
every 60 s, the minimum). It should get warmup tasks first; their actives move to it at a
probing rebalance once they have caught up; the tasks that do not move are never revoked
(cooperative rebalancing) and keep processing throughout.

Processing is observed from outside: every ~100 ms the committed offsets of the 4 input
partitions are sampled (admin list_group_offsets), from the join until ~10 s after the first
active task runs on the new instance. A task's gap is the longest time its committed offset
did not move; with commit_interval_ms 1000, ~1 s is the floor, and commits are deferred while a
rebalance is in progress, so a rebalance shows as a gap even when records keep being processed.
Processing itself is seen from the output: each value carries the wall-clock time its task
processed it (bench/topologies.py), and the longest interval between two processed records of a
task is its processing gap (at 100 records/s per partition, ~10 ms is the floor). Warmup start, catch-up
(changelog lag <= acceptable_recovery_lag) and promotion come from the new instance's
restoration/standby events (runner --events-file).

Prints progress, then as its last line one JSON object:
  longest_gap_unmoved_s  longest gap of the tasks that stayed on the first instance
  longest_gap_moved_s    longest gap of the tasks that moved (includes the hand-over)
  warmup_to_move_s       warmup start -> promotion on the new instance (longest over moved tasks)
  longest_processing_gap_unmoved_s / _moved_s   the same from the output stamps
  machine (plus join_to_move_s, warmup_catch_up_s, per-task figures)

    python bench/scale_out.py [--records 400000] [--keys 400000] [--rate 400]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from itertools import pairwise
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from airflow_stateful_provider.streams.status.reader import fetch_application_status, read_status_documents
from bench.topologies import (
    STORE,
    OffsetReader,
    SteadyProducer,
    machine,
    produce_keys,
)
from tools.instances import InstanceProcess
from tools.kafka.broker import LocalKafkaBroker
from tools.waits import wait_until

PARTITIONS = 4
APP = "bench-scale-out"
INPUT, OUTPUT = "bench-scale-out-in", "bench-scale-out-out"
ACCEPTABLE_RECOVERY_LAG = 1_000
PROBING_REBALANCE_INTERVAL_MS = 60_000
SAMPLE_INTERVAL_S = 0.1
AFTER_MOVE_S = 10.0


def instance_config(bootstrap: str, work: Path, name: str) -> dict:
    return {"application_id": APP, "bootstrap_servers": bootstrap, "state_dir": str(work / name),
            "instance_id": name, "commit_interval_ms": 1_000, "status_interval_ms": 500,
            "num_standby_replicas": 0, "acceptable_recovery_lag": ACCEPTABLE_RECOVERY_LAG,
            "probing_rebalance_interval_ms": PROBING_REBALANCE_INTERVAL_MS,
            "consumer_configs": {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 2_000},
            "app_configs": {"input": INPUT, "output": OUTPUT}}


class OffsetSampler(threading.Thread):
    """Committed input offsets every SAMPLE_INTERVAL_S: (monotonic seconds, {partition: offset})."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.reader = OffsetReader(bootstrap)
        self.samples: list[tuple[float, dict[int, int]]] = []
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            at = time.monotonic()
            self.samples.append((at, self.reader.committed(APP, INPUT)))
            self._stopped.wait(max(0.0, at + SAMPLE_INTERVAL_S - time.monotonic()))

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=30)
        self.reader.close()


class OutputCollector(threading.Thread):
    """Processing times per task, from the output values (bench/topologies.py stamps each
    with the wall-clock time the processor handled it): a gap seen from inside the tasks,
    independent of when offsets get committed."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=5_000)
        tps = [TopicPartition(OUTPUT, p) for p in range(PARTITIONS)]
        self.consumer.assign(tps)
        for tp, end in self.consumer.end_offsets(tps).items():
            self.consumer.seek(tp, end)
        self.processed_at: dict[str, list[int]] = {f"0_{p}": [] for p in range(PARTITIONS)}
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            for batch in self.consumer.poll(timeout_ms=200).values():
                for record in batch:
                    value = json.loads(record.value)
                    self.processed_at[value["task"]].append(value["at"])

    def stop(self) -> None:
        """Drain what the instances produced until now, then stop."""
        time.sleep(2)
        self._stopped.set()
        self.join(timeout=30)
        self.consumer.close()

    def longest_gap(self, task: str, from_ms: int, to_ms: int) -> tuple[float, int]:
        """(longest time between two processed records of ``task``, wall-clock ms it began)."""
        times = sorted(t for t in self.processed_at[task] if from_ms <= t <= to_ms)
        points = [from_ms, *times, to_ms]
        gap, began = max((b - a, a) for a, b in pairwise(points))
        return gap / 1000, began


def longest_gap(samples: list[tuple[float, dict[int, int]]], partition: int) -> tuple[float, float]:
    """(longest time without progress of ``partition``'s committed offset, when it started,
    relative to the first sample). The time from the last progress to the end counts too."""
    start = samples[0][0]
    last_change, previous = start, samples[0][1].get(partition, 0)
    longest, longest_at = 0.0, 0.0
    for at, offsets in samples[1:]:
        value = offsets.get(partition, 0)
        if value != previous:
            if at - last_change > longest:
                longest, longest_at = at - last_change, last_change - start
            last_change, previous = at, value
    if samples[-1][0] - last_change > longest:
        longest, longest_at = samples[-1][0] - last_change, last_change - start
    return longest, longest_at


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000, help="input records loaded before the join")
    parser.add_argument("--keys", type=int, default=400_000, help="distinct keys (the store holds this many)")
    parser.add_argument("--rate", type=int, default=400, help="steady input records/s from before the join")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, broker, state)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-scale-out-"))
    print(f"work directory {work}", flush=True)
    with LocalKafkaBroker(work / "kafka") as broker:
        bootstrap = broker.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(INPUT, PARTITIONS, 1), NewTopic(OUTPUT, PARTITIONS, 1)])
        admin.close()
        t0 = time.monotonic()
        produce_keys(bootstrap, INPUT, args.records, args.keys)
        print(f"produced {args.records} records over {args.keys} keys in {time.monotonic() - t0:.1f}s", flush=True)

        topology = "bench.topologies:marked_counts"
        first = InstanceProcess(topology, instance_config(bootstrap, work, "instance-0"), work, "instance-0")
        second = InstanceProcess(topology, instance_config(bootstrap, work, "instance-1"), work, "instance-1")
        offsets = OffsetReader(bootstrap)
        producer = SteadyProducer(bootstrap, INPUT, args.rate, args.keys)
        sampler = OffsetSampler(bootstrap)
        collector: OutputCollector | None = None
        try:
            t0 = time.monotonic()
            first.start()
            ends = offsets.ends(INPUT)
            wait_until(lambda: first.check_alive() is None and offsets.committed(APP, INPUT) == ends, 600,
                       f"instance-0 to process {sum(ends.values())} records", first.log_tail)
            print(f"instance-0 processed {sum(ends.values())} records in {time.monotonic() - t0:.1f}s", flush=True)
            producer.start()
            time.sleep(5)
            sampler.start()
            collector = OutputCollector(bootstrap)
            collector.start()
            time.sleep(1)
            joined = time.monotonic()
            joined_ms = time.time_ns() // 1_000_000
            second.start()
            print("instance-1 started (join)", flush=True)

            moved: set[str] = set()
            differing_since: list[float] = []

            def some_active_moved() -> bool:
                first.check_alive()
                second.check_alive()
                try:
                    documents = read_status_documents(bootstrap, APP)
                    status = fetch_application_status(bootstrap, APP)
                except Exception:  # noqa: BLE001 - transient read error
                    return False
                # An instance whose consumer lost a join result drops out of the group for good but
                # keeps publishing its old generation (see bench/failover.py WedgedGroup): say so.
                seen = {name: d.generation for name, d in documents.items()}
                if len(set(seen.values())) > 1:
                    differing_since.append(time.monotonic())
                    if differing_since[-1] - differing_since[0] > 20:
                        raise RuntimeError(f"instances report different group generations {seen} for over 20 s: "
                                           f"one dropped out of the group and did not rejoin\n"
                                           f"{first.log_tail(10)}\n{second.log_tail(10)}")
                else:
                    differing_since.clear()
                moved.update(t.task_id for t in status.tasks
                             if t.active and t.active.instance_id == "instance-1" and t.state == "running")
                return bool(moved)
            wait_until(some_active_moved, 240, "an active task to run on instance-1", lambda: second.log_tail(30))
            moved_at = time.monotonic()
            print(f"{sorted(moved)} running on instance-1 {moved_at - joined:.1f}s after the join", flush=True)
            time.sleep(AFTER_MOVE_S)
            some_active_moved()
            ended_ms = time.time_ns() // 1_000_000
        finally:
            if sampler.is_alive():
                sampler.stop()
            if collector is not None and collector.is_alive():
                collector.stop()
            producer.stop()
            offsets.close()
            first.stop()
            second.stop()

    samples = [(at, o) for at, o in sampler.samples if at >= joined]
    events = second.events()
    per_task: dict[str, dict] = {}
    for partition in range(PARTITIONS):
        task = f"0_{partition}"
        gap, gap_at = longest_gap(samples, partition)
        figures: dict = {"moved": task in moved, "longest_gap_s": round(gap, 2),
                         "gap_started_after_join_s": round(gap_at, 2)}
        processing_gap, processing_gap_began = collector.longest_gap(task, joined_ms, ended_ms)
        figures["longest_processing_gap_s"] = round(processing_gap, 2)
        figures["processing_gap_started_after_join_s"] = round((processing_gap_began - joined_ms) / 1000, 2)
        mine = [e for e in events if e["topic"] == f"{APP}-{STORE}-changelog" and e["partition"] == partition]
        warmup = next((e for e in mine if e["event"] == "standby_start"), None)
        caught_up = next((e for e in mine if e["event"] == "standby_batch"
                          and e["end_offset"] - e["batch_end_offset"] <= ACCEPTABLE_RECOVERY_LAG), None)
        promoted = next((e for e in mine if e["event"] == "standby_suspended" and e["reason"] == "promoted"), None)
        if warmup:
            figures["warmup_started_after_join_s"] = round((warmup["at_ms"] - joined_ms) / 1000, 2)
        if warmup and caught_up:
            figures["warmup_catch_up_s"] = round((caught_up["at_ms"] - warmup["at_ms"]) / 1000, 2)
        if warmup and promoted:
            figures["warmup_to_move_s"] = round((promoted["at_ms"] - warmup["at_ms"]) / 1000, 2)
            figures["restored_on_move"] = sum(e["total"] for e in mine if e["event"] == "restore_end"
                                              and e["at_ms"] >= promoted["at_ms"])
        per_task[task] = figures
        print(f"task {task}: {figures}", flush=True)

    unmoved = [f for f in per_task.values() if not f["moved"]]
    moved_figures = [f for f in per_task.values() if f["moved"]]
    result = {
        "longest_gap_unmoved_s": max((f["longest_gap_s"] for f in unmoved), default=None),
        "longest_gap_moved_s": max((f["longest_gap_s"] for f in moved_figures), default=None),
        "longest_processing_gap_unmoved_s": max((f["longest_processing_gap_s"] for f in unmoved), default=None),
        "longest_processing_gap_moved_s": max((f["longest_processing_gap_s"] for f in moved_figures), default=None),
        "warmup_to_move_s": max((f["warmup_to_move_s"] for f in moved_figures if "warmup_to_move_s" in f),
                                default=None),
        "warmup_catch_up_s": max((f["warmup_catch_up_s"] for f in moved_figures if "warmup_catch_up_s" in f),
                                 default=None),
        "join_to_move_s": round(moved_at - joined, 2),
        "moved_tasks": sorted(moved),
        "records_of_state": args.records, "input_rate_per_s": args.rate,
        "acceptable_recovery_lag": ACCEPTABLE_RECOVERY_LAG,
        "probing_rebalance_interval_ms": PROBING_REBALANCE_INTERVAL_MS,
        "samples": len(samples), "tasks": per_task, "machine": machine(),
    }
    print(f"longest gap in committed offsets: unmoved tasks {result['longest_gap_unmoved_s']}s, moved tasks "
          f"{result['longest_gap_moved_s']}s; in processing (output stamps): unmoved "
          f"{result['longest_processing_gap_unmoved_s']}s, moved {result['longest_processing_gap_moved_s']}s; "
          f"warmup -> move {result['warmup_to_move_s']}s (caught up after {result['warmup_catch_up_s']}s)")
    if not args.keep:  # ~60 MB; kept (with the instance logs) when something failed
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
