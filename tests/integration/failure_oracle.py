"""A counting application that fails on purpose, and the oracle every failure-path test checks.

The topology counts JSON records per key into the store "counts" and sends each new count
to the output topic. ``app_configs`` decide where it fails: ``fail_at`` (the record whose
``n`` makes the processor raise) and ``punctuate_fail_at`` (the stream time from which a
stream-time punctuator raises). A failed instance is followed by a restart on the same state
directory without the failure; the oracle then holds:

- the output, read ``read_committed``, holds for every key exactly the counts 1..n, once each
  (n: the key's input records the application was asked to count);
- the store holds n for every key;
- while an instance is failed and stopped, what it committed is consistent: every key's
  committed outputs are 1..m with no gaps or repeats, m never above the key's records below
  the committed input offsets.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from airflow_stateful_provider.streams import (
    KafkaStreams,
    KafkaStreamsState,
    Processor,
    PunctuationType,
    Stores,
    StreamsConfig,
    Topology,
    open_store,
)
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, produce, read_all
from tools.waits import wait_progressing

STORE = "counts"
PARTITIONS = 4


class StuckThenFailed:
    """For ``block_one_fail_other``: the first stream thread to process a record blocks in
    it until ``release`` is set; a record on any other thread then raises."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.blocked: threading.Thread | None = None
        self.release = threading.Event()

    def process(self, record) -> None:
        with self.lock:
            if self.blocked is None:
                self.blocked = threading.current_thread()
        if self.blocked is threading.current_thread():
            self.release.wait()  # no bound on purpose: user code that never returns (once released: at once)
        else:
            raise RuntimeError(f"user code failed on record {record.value['n']}")


#: application id -> its StuckThenFailed (in-process instances only).
STUCK_THEN_FAILED: dict[str, StuckThenFailed] = {}


class FailingCount(Processor):
    """Counts per key; raises at the record ``n == fail_at`` and, from stream time
    ``punctuate_fail_at`` on, in a stream-time punctuator; with ``block_one_fail_other``,
    see StuckThenFailed."""

    def init(self, context):
        self.context = context
        self.counts = context.get_state_store(STORE)
        configs = context.app_configs
        self.fail_at = configs.get("fail_at")
        self.punctuate_fail_at = configs.get("punctuate_fail_at")
        self.stuck_then_failed = STUCK_THEN_FAILED[context.application_id] \
            if configs.get("block_one_fail_other") else None
        if self.punctuate_fail_at is not None:
            context.schedule(1, PunctuationType.STREAM_TIME, self.punctuate)

    def process(self, record):
        if self.stuck_then_failed is not None:
            self.stuck_then_failed.process(record)
        if record.value.get("n") == self.fail_at:
            raise RuntimeError(f"user code failed on record {record.value['n']}")
        count = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, count)
        self.context.forward(record.with_value(count))

    def punctuate(self, stream_time: int) -> None:
        if stream_time >= self.punctuate_fail_at:
            raise RuntimeError(f"punctuator failed at stream time {stream_time}")


class Echo(Processor):
    """Forwards the ``blob`` of the records that have one (to the echo topic)."""

    def process(self, record):
        blob = record.value.get("blob")
        if blob is not None:
            self.context.forward(record.with_value(blob.encode()))


def counting_topology(input_topic: str, output_topic: str, echo_topic: str) -> Topology:
    """source -> count -> output (the oracle's counts); source -> echo -> echo topic."""
    topology = Topology()
    topology.add_source("source", input_topic, key_serde="string", value_serde="json")
    topology.add_processor("count", FailingCount, "source")
    topology.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store(STORE), "string",
                                                            "int64"), "count")
    topology.add_sink("sink", output_topic, "count", key_serde="string", value_serde="int64")
    topology.add_processor("echo", Echo, "source")
    topology.add_sink("echo-sink", echo_topic, "echo", key_serde="string", value_serde="bytes")
    return topology


def produce_numbered(bootstrap_servers: str, topic: str, count: int, keys: int, *, start_ms: int,
                     extra: Iterable[tuple[str, bytes, int]] = ()) -> dict[str, int]:
    """Records n = 0 .. count-1 keyed ``k<n % keys>`` with timestamps ``start_ms + n``;
    ``extra`` records (key, raw value, timestamp) go in after the first half, to the key's
    partition. Returns the records per key (the oracle's n, extra records left out)."""
    per_key: Counter[str] = Counter()
    records: list[tuple[str, bytes, int]] = []
    for n in range(count):
        if n == count // 2:
            records.extend(extra)
        key = f"k{n % keys:03d}"
        records.append((key, json.dumps({"n": n}).encode(), start_ms + n))
        per_key[key] += 1
    produce(bootstrap_servers, topic, records, linger_ms=20, max_request_size=16 << 20)
    return dict(per_key)


class CountingApp:
    """One application (topics, state directory) run by successive in-process instances."""

    def __init__(self, bootstrap_servers: str, name: str, state_dir: Path, **config: Any) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.app_id = f"app-{name}"
        self.input = f"in-{name}"
        self.output = f"out-{name}"
        self.echo = f"echo-{name}"
        self.state_dir = state_dir
        self.config = config

    def streams(self, **overrides: Any) -> KafkaStreams:
        values = {"application_id": self.app_id, "bootstrap_servers": self.bootstrap_servers,
                  "state_dir": str(self.state_dir), "consumer_configs": {"session_timeout_ms": 10_000},
                  **self.config, **overrides}
        return KafkaStreams(counting_topology(self.input, self.output, self.echo), StreamsConfig(**values))

    def create_topics(self, replication_factor: int = 1, **input_configs: str) -> None:
        create_topics(self.bootstrap_servers, {self.input: PARTITIONS, self.output: PARTITIONS, self.echo: 1},
                      {self.input: input_configs}, replication_factor=replication_factor)

    def committed_input(self) -> dict[int, int]:
        return committed_offsets(self.bootstrap_servers, self.app_id, self.input)

    def committed_total(self) -> int:
        """The input offsets committed, summed over partitions: the progress of its waits."""
        return sum(self.committed_input().values())

    def run_until_failed(self, **overrides: Any) -> tuple[KafkaStreams, list[BaseException]]:
        """Start an instance and wait until it ends in ERROR; returns it and what its
        uncaught-exception handler saw."""
        seen: list[BaseException] = []
        streams = self.streams(**overrides)
        streams.set_uncaught_exception_handler(seen.append)
        streams.start()
        try:
            wait_progressing(lambda: streams.state is KafkaStreamsState.ERROR, self.committed_total,
                             "the instance to fail", measure="committed input offsets",
                             context=lambda: f"state {streams.state}")
        finally:
            closed = streams.close(timeout=60)
        assert closed, f"close(timeout=60) of the failed instance did not complete (state {streams.state})"
        assert streams.state is KafkaStreamsState.ERROR, streams.state
        return streams, seen

    def run_to_end(self, **overrides: Any) -> dict[str, int]:
        """Start an instance, wait until it committed every input record, close it cleanly;
        returns its metrics summed over its tasks (process-total, dropped-records-total:...)."""
        ends = end_offsets(self.bootstrap_servers, self.input)
        streams = self.streams(**overrides)
        streams.start()
        try:
            def all_committed() -> bool:
                if streams.state in (KafkaStreamsState.ERROR, KafkaStreamsState.PENDING_ERROR):
                    raise AssertionError(f"the instance failed while committing its input: state {streams.state}")
                return self.committed_input() == ends

            wait_progressing(all_committed, self.committed_total, f"every input committed ({ends})",
                             measure="committed input offsets",
                             context=lambda: f"state {streams.state}, committed {self.committed_input()}")
            metrics: Counter[str] = Counter()
            for task_metrics in streams.metrics().values():
                metrics.update(task_metrics)
        finally:
            assert streams.close(timeout=60)
        assert streams.state is KafkaStreamsState.NOT_RUNNING, streams.state
        return dict(metrics)

    def echoed(self) -> list[Any]:
        return read_all(self.bootstrap_servers, self.echo)

    def outputs_per_key(self) -> dict[str, list[int]]:
        outputs: dict[str, list[int]] = defaultdict(list)
        for record in read_all(self.bootstrap_servers, self.output):
            outputs[record.key.decode()].append(int.from_bytes(record.value, "big", signed=True))
        return dict(outputs)

    def counted_below_committed(self) -> dict[str, int]:
        """Per key, its input records below the committed input offsets: what exactly-once
        must have counted in the committed output, no more and no less."""
        committed = self.committed_input()
        counted: Counter[str] = Counter()
        for record in read_all(self.bootstrap_servers, self.input):
            if record.offset < committed.get(record.partition, 0) and record.key is not None:
                counted[record.key.decode()] += 1
        return dict(counted)

    def store_counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for partition in range(PARTITIONS):
            path = self.state_dir / self.app_id / f"0_{partition}" / STORE
            if not path.exists():
                continue
            with open_store(path, read_only=True) as store:
                found.update({key.decode(): int.from_bytes(value, "big", signed=True) for key, value in store.all()})
        return found


def assert_consistent_prefixes(outputs: dict[str, list[int]]) -> None:
    """Every key's committed outputs are 1..m: nothing repeated, nothing skipped."""
    bad = {key: values for key, values in outputs.items() if values != list(range(1, len(values) + 1))}
    assert not bad, f"{len(bad)} keys with outputs other than 1..m, e.g. {dict(list(bad.items())[:3])}"


def assert_committed_state_consistent(app: CountingApp, *, skipped: set[str] = frozenset()) -> None:
    """Exactly-once, after a failure: what was committed is a consistent cut. Every key's
    committed outputs are 1..m with m its records below the committed input offsets (keys in
    ``skipped`` had a record that was skipped, so m may be one less)."""
    outputs = app.outputs_per_key()
    assert_consistent_prefixes(outputs)
    below = app.counted_below_committed()
    wrong = {key: (len(outputs.get(key, [])), n) for key, n in below.items()
             if len(outputs.get(key, [])) != n and not (key in skipped and len(outputs.get(key, [])) == n - 1)}
    wrong.update({key: (len(values), 0) for key, values in outputs.items() if key not in below})
    assert not wrong, (f"{len(wrong)} keys whose committed outputs do not match the committed input offsets "
                       f"(outputs, inputs below the offsets), e.g. {dict(list(wrong.items())[:5])}")


def assert_exact(outputs: dict[str, list[int]], stores: dict[str, int], expected: dict[str, int]) -> None:
    """The oracle after the restart: outputs exactly 1..n per key, stores n."""
    wrong = {key: outputs.get(key) for key, n in expected.items() if outputs.get(key) != list(range(1, n + 1))}
    assert not wrong, (f"{len(wrong)} of {len(expected)} keys without outputs exactly 1..n, e.g. "
                       f"{ {k: (expected[k], v) for k, v in list(wrong.items())[:3]} }")
    assert set(outputs) == set(expected), f"unexpected keys {sorted(set(outputs) - set(expected))[:5]}"
    assert stores == expected, {k: (stores.get(k), n) for k, n in expected.items() if stores.get(k) != n}
