"""A session aggregation killed between writing its last commit's changelog and committing
its input offsets (at-least-once) loses no input and makes no wrong window on restart.

The kill leaves the changelog cut anywhere in that flush, and so ahead of the committed
input: the restarted task restores it and processes the records since the commit again.
Each test runs a first task up to such a kill (a fake producer keeps what it sent; the
cut decides which of the last flush's changelog records the broker kept), restores a
second task from the cut changelog, replays the input since the commit and compares the
output table (every output record of both tasks, latest per key) with the sessions of a
failure-free run: the same windows, each counting its clicks at least once and at most
once more for each click processed again."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.records import ConsumedRecord, OffsetAndMetadata
from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
from airflow_stateful_provider.streams.processing.task import StreamTask
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition
from tests.integration.topologies import session_counts, session_counts_oracle

#: Retention = gap (no grace), segments of half of it: a click a few gaps later expires a
#: session, so a restored store whose clock ran ahead would hide the sessions replayed
#: clicks belong to.
GAP = 200_000
CHANGELOG = TopicPartition("app-sessions-changelog", 0)
#: (user, timestamp) before the last commit, then after it (processed, never committed)
COMMITTED = [("a", 0), ("a", 100_000), ("d", 50_000)]
UNCOMMITTED = [("a", 150_000), ("b", 1_000_000)]
#: the repository root: the killed run imports this module from there
ROOT = str(Path(__file__).resolve().parents[4])


class Acknowledged:
    """The future of a send the broker acknowledged at ``offset``."""

    def __init__(self, topic, partition, offset):
        self.metadata = SimpleNamespace(topic=topic, partition=partition, offset=offset)

    def add_errback(self, fn, *args):
        pass

    def add_callback(self, fn):
        fn(self.metadata)


class Producer:
    """Keeps what the task sent; every record counts as acknowledged."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int | None, bytes | None, bytes | None, int]] = []

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        offset = sum(1 for sent in self.sent if sent[:2] == (topic, partition))
        self.sent.append((topic, partition, key, value, timestamp_ms))
        return Acknowledged(topic, partition, offset)

    def flush(self, timeout=None):
        pass

    def partitions_for(self, topic):
        return {0}


def start_task(state_dir, store_type, producer, committed=None, changelog=(), cache_max_bytes=10 * 1024 * 1024):
    """A task as the runtime starts one: stores opened, stream time from the committed
    offsets' metadata, the changelog restored after the checkpointed offset, processors
    initialized. Returns the task and the first changelog offset it restored."""
    topology = session_counts(GAP, store="sessions", sink="out").build()
    config = StreamsConfig("app", "localhost:9092", state_dir=str(state_dir),
                           statestore_cache_max_bytes=cache_max_bytes)
    collector = RecordCollector(producer, task_id=TaskId(0, 0))
    stores = TaskStateManager(TaskId(0, 0), topology, config, record_collector=collector, store_type=store_type)
    task = StreamTask(TaskId(0, 0), topology, config, record_collector=collector, stores=stores)
    task.initialize()
    if committed:
        task.initialize_task_time(committed)
    restore_from = stores.checkpointed_offsets().get(CHANGELOG, -1) + 1
    if changelog[restore_from:]:
        stores.restore(CHANGELOG, list(changelog[restore_from:]))
    task.complete_restoration()
    return task, restore_from


def process(task, clicks, first_offset):
    task.add_records(("clicks", 0), [ConsumedRecord("clicks", 0, first_offset + i, ts, user.encode(), b"click", ())
                                     for i, (user, ts) in enumerate(clicks)])
    while task.process():
        pass


def changelog_records(producer):
    return [ChangelogRecord(key, value, ts, offset) for offset, (_, _, key, value, ts)
            in enumerate(s for s in producer.sent if s[0] == CHANGELOG[0])]


def output_table(*producers):
    latest = {}
    for producer in producers:
        for topic, _, key, value, _ in producer.sent:
            if topic == "out":
                latest[key.decode()] = None if value is None else int.from_bytes(value, "big", signed=True)
    table = {}
    for key, count in latest.items():
        if count is not None:
            user, _, window = key.rpartition("@")
            start, end = window.split("-")
            table[(user, int(start), int(end))] = count
    return table


def assert_at_least_once(table):
    expected = session_counts_oracle(COMMITTED + UNCOMMITTED, GAP)
    assert set(table) == set(expected), f"windows {sorted(table)}, expected {sorted(expected)}"
    wrong = {w: (table[w], n) for w, n in expected.items() if not n <= table[w] <= n + len(UNCOMMITTED)}
    assert not wrong, f"(count, expected) of windows counting a click never or a committed one twice: {wrong}"


def first_run(state_dir, store_type, cache_max_bytes=10 * 1024 * 1024):
    """Up to the kill: the commit of COMMITTED, then UNCOMMITTED processed and flushed (its
    changelog and output records sent), the offsets not committed."""
    producer = Producer()
    task, _ = start_task(state_dir, store_type, producer, cache_max_bytes=cache_max_bytes)
    process(task, COMMITTED, 0)
    committed = task.prepare_commit()
    task.post_commit(enforce_checkpoint=True)
    at_commit = len(changelog_records(producer))
    process(task, UNCOMMITTED, len(COMMITTED))
    task.prepare_commit()
    return task, producer, committed, at_commit


@pytest.mark.parametrize("cache_max_bytes", [10 * 1024 * 1024, 2_000, 0], ids=["cached", "evicting", "uncached"])
def test_without_a_crash_the_output_table_is_the_oracle(tmp_path, cache_max_bytes):
    """The baseline of the tests below: 8 users' clicks in timestamp order, sessions merging
    and expiring across commits every 50 clicks (many keys per flush, evictions)."""
    rng = random.Random(3)
    clock = {user: rng.randrange(0, 4 * GAP) for user in "abcdefgh"}
    clicks = []
    for _ in range(600):
        user = rng.choice("abcdefgh")
        clock[user] += rng.randrange(1, GAP // 5) if rng.random() < 0.9 else rng.randrange(GAP + 1, 4 * GAP)
        clicks.append((user, clock[user]))
    clicks.sort(key=lambda click: click[1])
    producer = Producer()
    task, _ = start_task(tmp_path, "rocksdb", producer, cache_max_bytes=cache_max_bytes)
    for first in range(0, len(clicks), 50):
        process(task, clicks[first:first + 50], first)
        task.prepare_commit()
        task.post_commit()
    task.close()
    assert output_table(producer) == session_counts_oracle(clicks, GAP)


@pytest.mark.parametrize("cache_max_bytes", [10 * 1024 * 1024, 1, 0], ids=["cached", "evicting", "uncached"])
@pytest.mark.parametrize("store_type", ["in_memory", "rocksdb"])
def test_a_changelog_cut_anywhere_in_the_last_flush_loses_no_click_and_makes_no_wrong_window(tmp_path, store_type,
                                                                                            cache_max_bytes):
    task, first, committed, at_commit = first_run(tmp_path / "first", store_type, cache_max_bytes)
    task.close(clean=False)
    changelog = changelog_records(first)
    assert len(changelog) - at_commit == 3  # a's merged session, a's old one removed, b's (in some order)
    for cut in range(at_commit, len(changelog) + 1):
        second = Producer()
        task, _ = start_task(tmp_path / f"second-{cut}", store_type, second, committed, changelog[:cut],
                             cache_max_bytes)
        process(task, UNCOMMITTED, len(COMMITTED))
        task.prepare_commit()
        task.close()
        table = output_table(first, second)
        try:
            assert_at_least_once(table)
        except AssertionError as exc:
            raise AssertionError(f"changelog cut after {cut - at_commit} of the last flush's "
                                 f"{len(changelog) - at_commit} records: {exc}") from None


KILLED_RUN = """
import json, os
from tests.unit.streams.state.test_session_crash_replay import first_run
task, producer, committed, at_commit = first_run({state_dir!r}, "rocksdb")
with open({out!r}, "w") as out:
    json.dump({{"sent": [[topic, partition, key.hex(), None if value is None else value.hex(), ts]
                        for topic, partition, key, value, ts in producer.sent],
               "committed": [[tp[0], tp[1], om.offset, om.metadata] for tp, om in committed.items()],
               "at_commit": at_commit}}, out)
os._exit(9)  # kill -9 before the input offsets are committed: no close, no flush
"""


def test_a_kill_before_the_offset_commit_leaves_local_files_at_the_last_commit(tmp_path):
    """Restarted on the same state directory, the task restores only the changelog after its
    checkpoint: what the sessions replayed need must still be in the local files, so they may
    not hold the writes (and expiry) of the records after the last commit."""
    killed = tmp_path / "killed"
    out = tmp_path / "first.json"
    done = subprocess.run([sys.executable, "-c", KILLED_RUN.format(state_dir=str(killed), out=str(out))],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 9, done.stderr
    run = json.loads(out.read_text())
    first = Producer()
    first.sent = [(topic, partition, bytes.fromhex(key), None if value is None else bytes.fromhex(value), ts)
                  for topic, partition, key, value, ts in run["sent"]]
    committed = {TopicPartition(topic, partition): OffsetAndMetadata(offset, metadata)
                 for topic, partition, offset, metadata in run["committed"]}
    changelog, at_commit = changelog_records(first), run["at_commit"]
    for cut in range(at_commit, len(changelog) + 1):
        state_dir = tmp_path / f"restart-{cut}"
        shutil.copytree(killed, state_dir)
        second = Producer()
        task, restored_from = start_task(state_dir, "rocksdb", second, committed, changelog[:cut])
        assert restored_from == at_commit  # the checkpoint of the last commit: only the last flush is restored
        process(task, UNCOMMITTED, len(COMMITTED))
        task.prepare_commit()
        task.close()
        try:
            assert_at_least_once(output_table(first, second))
        except AssertionError as exc:
            raise AssertionError(f"changelog cut after {cut - at_commit} of the last flush's "
                                 f"{len(changelog) - at_commit} records: {exc}") from None
