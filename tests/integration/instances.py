"""Streams instances as separate OS processes, and small Kafka helpers for the tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

REPO_ROOT = Path(__file__).resolve().parents[2]


class InstanceProcess:
    """``python -m airflow_stateful_provider.streams.runner`` with its log in a file."""

    def __init__(self, topology: str, config: dict[str, Any], work_dir: Path, name: str) -> None:
        self.topology = topology
        self.config = config
        self.work_dir = Path(work_dir)
        self.name = name
        self.log_path = self.work_dir / f"{name}.log"
        self.events_path = self.work_dir / f"{name}.events.jsonl"
        self.process: subprocess.Popen | None = None

    def start(self) -> "InstanceProcess":
        config_path = self.work_dir / f"{self.name}.json"
        config_path.write_text(json.dumps(self.config))
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "airflow_stateful_provider.streams.runner", "--topology", self.topology,
                 "--config", str(config_path), "--events-file", str(self.events_path)], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
        return self

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def events(self) -> list[dict]:
        """Restoration and standby events written so far (runner --events-file)."""
        if not self.events_path.exists():
            return []
        return [json.loads(line) for line in self.events_path.read_text().splitlines() if line.strip()]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM and wait: the instance commits, checkpoints and leaves the group."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"instance {self.name} did not stop within {timeout}s:\n{self.log_tail()}")

    def ensure_stopped(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def assert_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"instance {self.name} exited with {self.process.returncode}:\n{self.log_tail()}")


def create_topics(bootstrap_servers: str, partitions: dict[str, int], configs: dict[str, dict] | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.create_topics([NewTopic(name, count, 1, topic_configs=(configs or {}).get(name, {}))
                             for name, count in partitions.items()])
    finally:
        admin.close()


def end_offsets(bootstrap_servers: str, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers)
    try:
        partitions = consumer.partitions_for_topic(topic)
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        consumer.close()


def committed_offsets(bootstrap_servers: str, group: str, topic: str) -> dict[int, int]:
    from kafka.errors import KafkaError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        offsets = admin.list_group_offsets({group: None}).get(group, {})
    except KafkaError as exc:
        if not exc.retriable:
            raise
        return {}  # e.g. the group coordinator is still being elected: nothing committed yet
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic and om.offset >= 0}


def read_all(bootstrap_servers: str, topic: str) -> list[Any]:
    """Every record of ``topic``, in partition then offset order."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records: list[Any] = []
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end offsets {ends}")
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def wait_until(condition: Callable[[], bool], timeout: float, what: str, on_timeout: Callable[[], str] = lambda: "",
               interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{on_timeout()}")
        time.sleep(interval)
