"""A session-count topology on a real broker survives SIGKILL without losing input.

100k synthetic clicks over 1k users; the instance process is killed with SIGKILL
mid-run and restarted on the same state directory. At-least-once, as in Kafka Streams:

- every session of a failure-free run is in the final output table, counting each of
  its clicks at least once; the only excess allowed is from the clicks after the last
  commit before the kill (processed twice);
- the table holds no other window, except intermediate windows the killed instance wrote
  whose retraction the kill lost: the click that merged such a window into a larger one
  was after the last commit, its changelog records reached the broker and its output
  records did not (or the reverse), and the restarted task, whose store no longer holds
  the window, cannot retract it (docs/failure-handling.md). Each must be what the killed
  instance computed: a prefix of a real session counting its clicks once."""

from __future__ import annotations

import bisect
import random
import time
import uuid
from collections import defaultdict

import pytest

from airflow_stateful_provider.streams.state.session.key import session_key_from_bytes
from tests.integration.topologies import SESSION_GAP_MS, session_counts_oracle
from tools.instances import InstanceProcess
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, produce, read_all
from tools.waits import wait_for_commits

pytestmark = pytest.mark.kafka

USERS, CLICKS = 1_000, 100_000


def generate_clicks(seed: int = 7) -> list[tuple[str, int]]:
    """(user, timestamp) in global timestamp order; per user, gaps mostly inside a session
    with some longer than the session gap. Event time lies in the last hours (about 4 h
    of clicks): the session changelog's time retention (store retention + 1 day,
    docs/semantics.md §7) lets the broker delete records with older timestamps."""
    rng = random.Random(seed)
    base = int(time.time() * 1000) - 6 * 3_600_000
    clock = {f"user-{u:04d}": base + rng.randrange(0, 3_600_000) for u in range(USERS)}
    clicks = []
    users = sorted(clock)
    for _ in range(CLICKS):
        user = rng.choice(users)
        step = (rng.randrange(1_000, 60_000) if rng.random() < 0.9
                else rng.randrange(SESSION_GAP_MS + 1, 4 * SESSION_GAP_MS))
        clock[user] += step
        clicks.append((user, clock[user]))
    clicks.sort(key=lambda c: c[1])
    return clicks


def output_table(records) -> dict[tuple[str, int, int], object]:
    """(user, start, end) -> the latest record of each window key that is not a tombstone."""
    latest = {record.key: record for record in records}
    table = {}
    for key, record in latest.items():
        if record.value is not None:
            user, _, window = key.decode().rpartition("@")
            start, end = window.split("-")
            table[(user, int(start), int(end))] = record
    return table


def count_of(record) -> int:
    return int.from_bytes(record.value, "big", signed=True)


def final_sessions(records) -> dict[tuple[str, int, int], int]:
    """(user, start, end) -> count: the output table."""
    return {window: count_of(record) for window, record in output_table(records).items()}


def left_by_the_kill(windows, table, expected, clicks, at_kill, output_ends) -> set[tuple[str, int, int]]:
    """The ``windows`` (not in the oracle) that the kill explains (module docstring): written
    by the killed instance, a prefix of a real session counting its clicks once, and merged
    into a larger one by a click after the last commit. ``clicks``: records of the input."""
    stamps: dict[str, list[int]] = defaultdict(list)
    offsets = {}
    for record in clicks:
        user = record.key.decode()
        stamps[user].append(record.timestamp)
        offsets[(user, record.timestamp)] = (record.partition, record.offset)
    session_ends = {(user, start): end for user, start, end in expected}
    explained = set()
    for window in windows:
        user, start, end = window
        record, times = table[window], sorted(stamps[user])
        after = bisect.bisect_right(times, end)  # the click that merged the window away
        if (record.offset < output_ends.get(record.partition, 0) and end < session_ends.get((user, start), end)
                and count_of(record) == after - bisect.bisect_left(times, start)):
            partition, offset = offsets[(user, times[after])]
            if offset >= at_kill.get(partition, 0):
                explained.add(window)
    return explained


def describe_window_mismatch(bootstrap_servers, expected, actual, extra, at_kill, written_at_kill, sessions_topic,
                             changelog, instances) -> str:
    """What a failure needs to be diagnosed: the windows extra (that the kill does not
    explain) and missing, and for their users every output and changelog record with its
    offset, marked with whether the first instance wrote it (below the end offset read right
    after the kill)."""
    extra, missing = sorted(extra), sorted(set(expected) - set(actual))
    users = sorted({user for user, _, _ in extra + missing})[:5]
    lines = [f"{len(extra)} extra windows (window: count): {[(w, actual[w]) for w in extra[:10]]}",
             f"{len(missing)} missing windows: {[(w, expected[w]) for w in missing[:10]]}",
             f"committed input offsets at the kill: {at_kill}; end offsets at the kill: {written_at_kill}"]
    outputs = read_all(bootstrap_servers, sessions_topic)
    changes = read_all(bootstrap_servers, changelog)
    for user in users:
        lines.append(f"--- {user}: oracle {sorted((s, e, n) for (u, s, e), n in expected.items() if u == user)}")
        for record in outputs:
            if record.key.decode().rpartition("@")[0] == user:
                value = None if record.value is None else int.from_bytes(record.value, "big", signed=True)
                before = record.offset < written_at_kill[sessions_topic].get(record.partition, 0)
                lines.append(f"  output p{record.partition}@{record.offset} {'first ' if before else 'second'} "
                             f"{record.key.decode()} = {value}")
        for record in changes:
            key = session_key_from_bytes(record.key)
            if key.key.decode() == user:
                value = None if record.value is None else int.from_bytes(record.value, "big", signed=True)
                before = record.offset < written_at_kill[changelog].get(record.partition, 0)
                lines.append(f"  changelog p{record.partition}@{record.offset} {'first ' if before else 'second'} "
                             f"{key.start}-{key.end} = {value}")
    for instance in instances:
        if instance is not None:
            lines.append(f"----- {instance.name}\n{instance.log_tail(30)}")
    return "\n".join(lines)


def test_sigkill_mid_run_loses_no_input(bootstrap_servers, tmp_path):
    app = f"crash-{uuid.uuid4().hex[:8]}"
    clicks_topic, sessions_topic = "clicks", "sessions"  # the topics of tests.integration.topologies:session_counts
    create_topics(bootstrap_servers, {clicks_topic: 4, sessions_topic: 4})
    clicks = generate_clicks()
    produce(bootstrap_servers, clicks_topic, [(user, b"click", ts) for user, ts in clicks], linger_ms=20,
            batch_size=512 * 1024)
    ends = end_offsets(bootstrap_servers, clicks_topic)
    assert sum(ends.values()) == CLICKS

    config = {"application_id": app, "bootstrap_servers": bootstrap_servers, "state_dir": str(tmp_path / "state"),
              "commit_interval_ms": 1000, "consumer_configs": {"session_timeout_ms": 10_000}}
    topology = "tests.integration.topologies:session_counts"
    changelog = f"{app}-click-sessions-changelog"
    first = InstanceProcess(topology, config, tmp_path, "first").start()
    second = None
    try:
        wait_for_commits(lambda: committed_offsets(bootstrap_servers, app, clicks_topic), 30_000,
                         "the first instance to commit 30k clicks", [first])
        first.kill()
        at_kill = committed_offsets(bootstrap_servers, app, clicks_topic)
        written_at_kill = {topic: end_offsets(bootstrap_servers, topic) for topic in (sessions_topic, changelog)}
        assert sum(at_kill.values()) < CLICKS, "the kill came too late to test recovery"

        second = InstanceProcess(topology, config, tmp_path, "second").start()
        wait_for_commits(lambda: committed_offsets(bootstrap_servers, app, clicks_topic), ends,
                         "the restarted instance to commit every click", [second])
        assert second.stop() == 0, second.log_tail()
    finally:
        first.ensure_stopped()
        if second is not None:
            second.ensure_stopped()

    expected = session_counts_oracle(clicks)
    table = output_table(read_all(bootstrap_servers, sessions_topic))
    actual = {window: count_of(record) for window, record in table.items()}
    extra = set(actual) - set(expected)
    extra -= left_by_the_kill(extra, table, expected, read_all(bootstrap_servers, clicks_topic), at_kill,
                              written_at_kill[sessions_topic])
    assert not extra and set(expected) <= set(actual), "session windows differ from the oracle\n" + \
        describe_window_mismatch(bootstrap_servers, expected, actual, extra, at_kill, written_at_kill, sessions_topic,
                                 changelog, [first, second])
    short = {w: (actual[w], n) for w, n in expected.items() if actual[w] < n}
    assert not short, f"sessions missing clicks (lost input): {list(short.items())[:5]}"
    excess = sum(actual[w] - n for w, n in expected.items())
    uncommitted = sum(ends[p] - at_kill.get(p, 0) for p in ends)
    assert excess <= uncommitted, f"{excess} duplicates, but only {uncommitted} clicks were after the last commit"
