"""A session-count topology on a real broker survives SIGKILL without losing input.

100k synthetic clicks over 1k users; the instance process is killed with SIGKILL
mid-run and restarted on the same state directory. Every click must be reflected in
the final sessions, and the only excess allowed is from records after the last commit
before the kill (at-least-once)."""

from __future__ import annotations

import random
import time
import uuid
from collections import defaultdict

import pytest
from kafka import KafkaProducer

from tests.integration.instances import committed_offsets, create_topics, end_offsets, read_all
from airflow_stateful_provider.streams.state.session_key import session_key_from_bytes
from tools.instances import InstanceProcess, wait_for_commits
from tests.integration.topologies import SESSION_GAP_MS

pytestmark = pytest.mark.kafka

USERS, CLICKS = 1_000, 100_000


def generate_clicks(seed: int = 7) -> list[tuple[str, int]]:
    """(user, timestamp) in global timestamp order; per user, gaps mostly inside a session
    with some longer than the session gap. Event time lies in the last hours (about 4 h
    of clicks): the session changelog's time retention (store retention + 1 day, SEMANTICS
    §7) lets the broker delete records with older timestamps."""
    rng = random.Random(seed)
    base = int(time.time() * 1000) - 6 * 3_600_000
    clock = {f"user-{u:04d}": base + rng.randrange(0, 3_600_000) for u in range(USERS)}
    clicks = []
    users = sorted(clock)
    for _ in range(CLICKS):
        user = rng.choice(users)
        step = rng.randrange(1_000, 60_000) if rng.random() < 0.9 else rng.randrange(SESSION_GAP_MS + 1, 4 * SESSION_GAP_MS)
        clock[user] += step
        clicks.append((user, clock[user]))
    clicks.sort(key=lambda c: c[1])
    return clicks


def oracle_sessions(clicks: list[tuple[str, int]]) -> dict[tuple[str, int, int], int]:
    by_user: dict[str, list[int]] = defaultdict(list)
    for user, ts in clicks:
        by_user[user].append(ts)
    sessions = {}
    for user, stamps in by_user.items():
        stamps.sort()
        start = prev = stamps[0]
        count = 0
        for ts in stamps:
            if ts - prev > SESSION_GAP_MS:
                sessions[(user, start, prev)] = count
                start, count = ts, 0
            prev = ts
            count += 1
        sessions[(user, start, prev)] = count
    return sessions


def final_sessions(records) -> dict[tuple[str, int, int], int]:
    latest: dict[str, int | None] = {}
    for record in records:
        latest[record.key.decode()] = None if record.value is None else int.from_bytes(record.value, "big", signed=True)
    sessions = {}
    for key, count in latest.items():
        if count is None:
            continue
        user, _, window = key.rpartition("@")
        start, end = window.split("-")
        sessions[(user, int(start), int(end))] = count
    return sessions


def describe_window_mismatch(bootstrap_servers, expected, actual, at_kill, written_at_kill, sessions_topic,
                             changelog, instances) -> str:
    """What a failure needs to be diagnosed: the windows extra and missing, and for their users
    every output and changelog record with its offset, marked with whether the first instance
    wrote it (below the end offset read right after the kill)."""
    extra, missing = sorted(set(actual) - set(expected)), sorted(set(expected) - set(actual))
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
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=20, batch_size=512 * 1024)
    for user, ts in clicks:
        producer.send(clicks_topic, key=user.encode(), value=b"click", timestamp_ms=ts)
    producer.flush()
    producer.close()
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

    expected = oracle_sessions(clicks)
    actual = final_sessions(read_all(bootstrap_servers, sessions_topic))
    assert set(actual) == set(expected), "session windows differ from the oracle\n" + describe_window_mismatch(
        bootstrap_servers, expected, actual, at_kill, written_at_kill, sessions_topic, changelog, [first, second])
    short = {w: (actual[w], n) for w, n in expected.items() if actual[w] < n}
    assert not short, f"sessions missing clicks (lost input): {list(short.items())[:5]}"
    excess = sum(actual.values()) - CLICKS
    uncommitted = sum(ends[p] - at_kill.get(p, 0) for p in ends)
    assert 0 <= excess <= uncommitted, f"{excess} duplicates, but only {uncommitted} clicks were after the last commit"

