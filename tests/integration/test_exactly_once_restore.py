"""Exactly-once: after kill -9 the stores hold exactly the committed state, and a task
restores only the changelog tail beyond its checkpoint, not the whole changelog.

One instance process counts JSON records per key into a persistent key-value store
(tests.integration.topologies:configured_counts, one output record per input record with
the key's new count). It processes a first wave to the end, then is killed with SIGKILL
while it processes a second wave, with a transaction open. Then:

- the store directories, opened as the killed process left them, never hold a count
  above what the committed input offsets give (no write of an uncommitted transaction
  reached RocksDB), and the store plus the committed changelog records after its
  checkpoint is exactly the committed state;
- the restarted instance restores a small tail (far below the changelog size);
- the output, read ``read_committed``, has for every key exactly the counts 1..n once each:
  nothing lost, nothing counted twice, so the restored store was the committed state.
"""

from __future__ import annotations

import collections
import os
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition

from airflow_stateful_provider.streams import open_store
from airflow_stateful_provider.streams.state.common.checkpoint import OffsetCheckpoint
from tools.instances import InstanceProcess
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, numbered_records, produce, read_all
from tools.waits import wait_for_commits, wait_progressing

pytestmark = pytest.mark.kafka

PARTITIONS = 2
KEYS = 2_000
FIRST_WAVE = 60_000
SECOND_WAVE = 30_000
STORE = "counts"


def produce_input(bootstrap_servers: str, topic: str, start: int, count: int) -> None:
    produce(bootstrap_servers, topic, numbered_records(start, count, KEYS, key_digits=5), linger_ms=20,
            batch_size=256 * 1024)


def input_keys_below(bootstrap_servers: str, topic: str, offsets: dict[int, int]) -> collections.Counter:
    """Per key, how many input records lie below ``offsets`` (the committed state)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        counts: collections.Counter = collections.Counter()
        pending = {tp for tp in tps if offsets.get(tp.partition, 0) > 0}
        read = [0]

        def step() -> bool:
            for tp, batch in consumer.poll(timeout_ms=200).items():
                read[0] += len(batch)
                for record in batch:
                    if record.offset < offsets.get(tp.partition, 0):
                        counts[record.key.decode()] += 1
                if consumer.position(tp) >= offsets.get(tp.partition, 0):
                    pending.discard(tp)
            return not pending

        wait_progressing(step, lambda: read[0], f"reading {topic} up to {offsets}", measure="records read",
                         interval=0)
        return counts
    finally:
        consumer.close()


def store_state_after_kill(state_dir: str, app: str, bootstrap_servers: str) -> tuple[dict[str, int], dict[str, int]]:
    """(counts in the stores as the killed process left them, the same plus the committed
    changelog records after each task's checkpoint)."""
    on_disk: dict[str, int] = {}
    caught_up: dict[str, int] = {}
    changelog = f"{app}-{STORE}-changelog"
    tail = {(r.partition, r.offset): r for r in read_all(bootstrap_servers, changelog)}
    for partition in range(PARTITIONS):
        task_dir = os.path.join(state_dir, app, f"0_{partition}")
        checkpoint = OffsetCheckpoint.in_task_dir(task_dir).read()
        applied = checkpoint.get((changelog, partition), -1)
        with open_store(os.path.join(task_dir, STORE), read_only=True) as store:  # as the kill left it
            stored = {k.decode(): int.from_bytes(v, "big", signed=True) for k, v in store.all()}
        on_disk.update(stored)
        replayed = dict(stored)
        for (p, offset), record in sorted(tail.items()):
            if p == partition and offset > applied:
                key = record.key.decode()
                if record.value is None:
                    replayed.pop(key, None)
                else:
                    replayed[key] = int.from_bytes(record.value, "big", signed=True)
        caught_up.update(replayed)
    return on_disk, caught_up


def test_kill_under_exactly_once_restores_only_the_tail(bootstrap_servers, tmp_path):
    app = f"eos-restore-{uuid.uuid4().hex[:8]}"
    source, sink = f"{app}-in", f"{app}-out"
    create_topics(bootstrap_servers, {source: PARTITIONS, sink: PARTITIONS})
    state_dir = str(tmp_path / "state")
    config = {"application_id": app, "bootstrap_servers": bootstrap_servers, "state_dir": state_dir,
              "processing_guarantee": "exactly_once_v2", "instance_id": f"{app}-0",
              "app_configs": {"input": source, "output": sink}}
    topology = "tests.integration.topologies:configured_counts"

    produce_input(bootstrap_servers, source, 0, FIRST_WAVE)
    first = InstanceProcess(topology, config, tmp_path, "first").start()
    second = None
    try:
        wait_for_commits(lambda: committed_offsets(bootstrap_servers, app, source),
                         end_offsets(bootstrap_servers, source), "the first wave to be committed", [first])
        produce_input(bootstrap_servers, source, FIRST_WAVE, SECOND_WAVE)
        total = FIRST_WAVE + SECOND_WAVE
        wait_for_commits(lambda: committed_offsets(bootstrap_servers, app, source), FIRST_WAVE + SECOND_WAVE // 3,
                         "a third of the second wave to be committed", [first])
        first.kill()
        at_kill = committed_offsets(bootstrap_servers, app, source)
        assert sum(at_kill.values()) < total, "the kill came after the last record: nothing was in flight"

        committed_state = input_keys_below(bootstrap_servers, source, at_kill)
        on_disk, caught_up = store_state_after_kill(state_dir, app, bootstrap_servers)
        ahead = {k: (v, committed_state[k]) for k, v in on_disk.items() if v > committed_state[k]}
        assert not ahead, f"uncommitted writes reached RocksDB (key: (stored, committed)): {list(ahead.items())[:5]}"
        assert caught_up == dict(committed_state), \
            "the stores plus the committed changelog tail differ from the committed state: " + str(
                [(k, caught_up.get(k), n) for k, n in committed_state.items() if caught_up.get(k) != n][:5])

        changelog_size = sum(end_offsets(bootstrap_servers, f"{app}-{STORE}-changelog").values())
        second = InstanceProcess(topology, config, tmp_path, "second").start()
        ends = end_offsets(bootstrap_servers, source)
        wait_for_commits(lambda: committed_offsets(bootstrap_servers, app, source), ends,
                         "the restarted instance to commit every record", [second])
        assert second.stop() == 0, second.log_tail()
    finally:
        first.ensure_stopped()
        if second is not None:
            second.ensure_stopped()

    restored = sum(e["total"] for e in second.events() if e["event"] == "restore_end")
    started = [e for e in second.events() if e["event"] == "restore_start"]
    assert started, f"the restarted instance restored nothing at all: {second.events()}"
    # a tail: at most the checkpoint interval (10,000 offsets) per task plus the last commits
    assert restored < changelog_size / 3, f"restored {restored} of {changelog_size} changelog records: not a tail"

    seen: dict[str, list[int]] = collections.defaultdict(list)
    for record in read_all(bootstrap_servers, sink):
        seen[record.key.decode()].append(int.from_bytes(record.value, "big", signed=True))
    expected = collections.Counter(f"k{i % KEYS:05d}" for i in range(total))
    wrong = {k: counts for k, counts in seen.items() if sorted(counts) != list(range(1, expected[k] + 1))}
    assert set(seen) == set(expected) and not wrong, \
        f"{len(wrong)} keys with counts other than 1..n once each, e.g. {list(wrong.items())[:2]}"
    print(f"\nexactly-once restore after kill -9: {restored} of {changelog_size} changelog records restored")
