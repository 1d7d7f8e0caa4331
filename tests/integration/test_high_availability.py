"""High availability across instance processes on a real broker (docs/semantics.md §2-§3):
failover to a standby, and what the status topic shows meanwhile."""

from __future__ import annotations

import threading
import time
import uuid
from itertools import pairwise

import pytest
from kafka import KafkaProducer

from airflow_stateful_provider.streams.status.reader import fetch_application_status, read_status_documents
from tools.instances import InstanceProcess
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, read_all
from tools.waits import wait_for_commits, wait_until

pytestmark = pytest.mark.kafka

KEYS = 100


def instance_config(app: str, bootstrap_servers: str, tmp_path, name: str, **overrides) -> dict:
    return {"application_id": app, "bootstrap_servers": bootstrap_servers, "state_dir": str(tmp_path / name),
            "instance_id": name, "commit_interval_ms": 200, "status_interval_ms": 200,
            "num_standby_replicas": 1, "consumer_configs": {"session_timeout_ms": 6_000}, **overrides}


class SteadyProducer(threading.Thread):
    """Produces ``total`` records over the KEYS keys at a steady pace."""

    def __init__(self, bootstrap_servers: str, topic: str, total: int, per_second: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap_servers, self.topic, self.total, self.per_second = bootstrap_servers, topic, total, per_second
        self.sent = 0

    def run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, linger_ms=5)
        started = time.monotonic()
        while self.sent < self.total:
            producer.send(self.topic, key=b"k%03d" % (self.sent % KEYS), value=b"{}")
            self.sent += 1
            if self.sent % 100 == 0:
                producer.flush()
                time.sleep(max(0.0, started + self.sent / self.per_second - time.monotonic()))
        producer.flush()
        producer.close()


def roles(status) -> dict[str, tuple[str | None, tuple[str, ...]]]:
    return {t.task_id: (t.active.instance_id if t.active else None, tuple(s.instance_id for s in t.standbys))
            for t in status.tasks}


def test_failover_to_the_standby_restores_at_most_its_lag_and_loses_nothing(bootstrap_servers, tmp_path):
    app = f"failover-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {"failover-in": 4, "failover-out": 4})
    topology = "tests.integration.topologies:failover_counts"
    instances = {name: InstanceProcess(topology, instance_config(app, bootstrap_servers, tmp_path, name),
                                       tmp_path, name)
                 for name in ("instance-0", "instance-1")}
    producer = SteadyProducer(bootstrap_servers, "failover-in", total=12_000, per_second=1_000)
    try:
        for instance in instances.values():
            instance.start()

        def balanced_with_standbys() -> bool:
            for instance in instances.values():
                instance.check_alive()
            try:
                status = fetch_application_status(bootstrap_servers, app)
            except Exception:  # noqa: BLE001 - not published yet
                return False
            current = roles(status)
            return len(current) == 4 and all(active and len(standbys) == 1 and standbys[0] != active
                                             for active, standbys in current.values()) \
                and all(t.state == "running" for t in status.tasks)
        wait_until(balanced_with_standbys, 90, "4 running tasks, each with a standby on the other instance",
                   lambda: instances["instance-0"].log_tail(20) + instances["instance-1"].log_tail(20))
        producer.start()
        wait_until(lambda: producer.sent >= 4_000, 30, "records flowing")

        def standbys_following() -> bool:
            documents = read_status_documents(bootstrap_servers, app)
            return all(c.current_offset > 0 for doc in documents.values() for t in doc.tasks
                       if t.role == "standby" for c in t.changelogs) and \
                sum(1 for doc in documents.values() for t in doc.tasks if t.role == "standby") == 4
        wait_until(standbys_following, 30, "every standby applying its changelog")
        snapshot = fetch_application_status(bootstrap_servers, app)
        lags = {t.task_id: [(s.lag, s.lag_basis) for s in t.standbys] for t in snapshot.tasks}
        assert all(len(v) == 1 and v[0][1] == "live" and 0 <= v[0][0] < 2_000 for v in lags.values()), lags

        task = "0_0"
        changelog = f"{app}-counts-changelog"
        documents = read_status_documents(bootstrap_servers, app)
        owner = fetch_application_status(bootstrap_servers, app).task(task).active.instance_id
        survivor = next(name for name in instances if name != owner)
        standby_position = next(c.current_offset for t in documents[survivor].tasks if t.task_id == task
                                for c in t.changelogs if c.topic == changelog)
        instances[owner].kill()
        at_kill = committed_offsets(bootstrap_servers, app, "failover-in")
        lag_bound = end_offsets(bootstrap_servers, changelog)[0] - standby_position

        def promoted() -> bool:
            instances[survivor].check_alive()
            task_status = fetch_application_status(bootstrap_servers, app, stale_after_ms=2_000).task(task)
            return task_status.active is not None and task_status.active.instance_id == survivor \
                and task_status.state == "running"
        wait_until(promoted, 60, f"{task} to run on {survivor}", instances[survivor].log_tail)
        events = [e for e in instances[survivor].events() if e["topic"] == changelog and e["partition"] == 0]
        restored = sum(e["total"] for e in events if e["event"] == "restore_end")
        changelog_end = end_offsets(bootstrap_servers, changelog)[0]
        assert standby_position > 0, "the standby applied nothing before the kill"
        assert restored <= lag_bound, f"restored {restored} records, the standby's lag at the kill was {lag_bound}"
        assert restored < changelog_end, "the whole changelog was replayed: the standby's store was not used"
        assert all(e["start_offset"] >= standby_position for e in events if e["event"] == "restore_start")
        assert [e["reason"] for e in events if e["event"] == "standby_suspended"] == ["promoted"]

        def survivor_owns_everything() -> bool:
            status = fetch_application_status(bootstrap_servers, app, stale_after_ms=2_000)
            return all(active == survivor for active, _ in roles(status).values()) and \
                [i.instance_id for i in status.stale_instances] == [owner]
        wait_until(survivor_owns_everything, 60, f"{survivor} to own every task with {owner} reported stale")

        producer.join(timeout=60)
        ends_in = end_offsets(bootstrap_servers, "failover-in")
        wait_for_commits(lambda: committed_offsets(bootstrap_servers, app, "failover-in"), ends_in,
                         "every record committed", [instances[survivor]])
        assert instances[survivor].stop() == 0, instances[survivor].log_tail()
    finally:
        for instance in instances.values():
            instance.ensure_stopped()

    counts: dict[bytes, int] = {}
    for record in read_all(bootstrap_servers, "failover-out"):
        counts[record.key] = int.from_bytes(record.value, "big", signed=True)
    produced = {b"k%03d" % k: len(range(k, producer.total, KEYS)) for k in range(KEYS)}
    assert all(counts[key] >= n for key, n in produced.items()), "a count is short: input was lost"
    uncommitted = sum(ends_in[p] - at_kill.get(p, 0) for p in ends_in)
    assert sum(counts.values()) - producer.total <= uncommitted


def test_scale_out_warms_up_first_moves_actives_once_caught_up_and_keeps_other_tasks_running(
        bootstrap_servers, tmp_path):
    app = f"scaleout-{uuid.uuid4().hex[:8]}"
    topic_in, topic_out = f"{app}-in", f"{app}-out"
    create_topics(bootstrap_servers, {topic_in: 4, topic_out: 4})
    settings = {"num_standby_replicas": 0, "acceptable_recovery_lag": 100, "max_warmup_replicas": 2,
                "probing_rebalance_interval_ms": 60_000,
                "app_configs": {"input": topic_in, "output": topic_out}}
    topology = "tests.integration.topologies:configured_counts"
    first = InstanceProcess(topology, instance_config(app, bootstrap_servers, tmp_path, "instance-0", **settings),
                            tmp_path, "instance-0")
    second = InstanceProcess(topology, instance_config(app, bootstrap_servers, tmp_path, "instance-1", **settings),
                             tmp_path, "instance-1")
    preload = SteadyProducer(bootstrap_servers, topic_in, total=20_000, per_second=20_000)
    steady = SteadyProducer(bootstrap_servers, topic_in, total=100_000, per_second=400)
    samples: list[tuple[float, dict[int, int]]] = []
    try:
        first.start()
        preload.run()
        # nothing is committed before the instance has started and joined: a longer stall allowed
        wait_for_commits(lambda: committed_offsets(bootstrap_servers, app, topic_in), 20_000,
                         "the first instance to load 20k records", [first], stall=90)
        steady.start()
        second.start()

        def sample() -> None:
            samples.append((time.monotonic(), committed_offsets(bootstrap_servers, app, topic_in)))

        def warming_up() -> bool:
            sample()
            second.check_alive()
            status = fetch_application_status(bootstrap_servers, app)
            summary = status.instance("instance-1") if any(i.instance_id == "instance-1" for i in status.instances) \
                else None
            return summary is not None \
                and all(t.active and t.active.instance_id == "instance-0" for t in status.tasks) \
                and any(s.instance_id == "instance-1" and s.warmup for t in status.tasks for s in t.standbys)
        wait_until(warming_up, 60, "instance-1 to receive warmups while instance-0 keeps every active",
                   second.log_tail, interval=0.5)

        def moved() -> bool:
            sample()
            first.check_alive()
            second.check_alive()
            status = fetch_application_status(bootstrap_servers, app)
            return any(t.active and t.active.instance_id == "instance-1" and t.state == "running"
                       for t in status.tasks)
        wait_until(moved, 120, "an active task to move to instance-1 at a probing rebalance",
                   lambda: second.log_tail(30), interval=0.5)
        status = fetch_application_status(bootstrap_servers, app)
        moved_tasks = {t.task_id for t in status.tasks if t.active and t.active.instance_id == "instance-1"}
        for _ in range(10):
            sample()
            time.sleep(0.5)
    finally:
        steady.total = steady.sent  # stop producing
        first.ensure_stopped()
        second.ensure_stopped()

    # Warmups caught up before their tasks moved: promotion restored little, not the whole changelog.
    changelog = f"{app}-counts-changelog"
    for task in moved_tasks:
        partition = int(task.split("_")[1])
        events = [e for e in second.events() if e["topic"] == changelog and e["partition"] == partition]
        assert any(e["event"] == "standby_start" for e in events), f"{task} moved without a warmup"
        restored = sum(e["total"] for e in events if e["event"] == "restore_end")
        assert restored <= 1_000, f"{task} restored {restored} records when it moved"
    # Tasks that did not move kept processing throughout: no long stall in their commits.
    stayed = [p for p in range(4) if f"0_{p}" not in moved_tasks]
    for partition in stayed:
        progress = [(at, offsets.get(partition, 0)) for at, offsets in samples]
        longest, last_change = 0.0, progress[0][0]
        for (_, previous), (at, value) in pairwise(progress):
            if value != previous:
                longest = max(longest, at - last_change)
                last_change = at
        assert longest < 10, f"task 0_{partition} stalled for {longest:.1f}s during the scale-out"
