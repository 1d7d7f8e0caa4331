"""The status document never shows a task half-way (real broker, in-process instances).

A reader thread builds the document of each live instance as fast as it can, while the
instances restore prepared changelogs, rebalance (a second instance joins with a standby:
tasks are revoked, resumed, moved and promoted) and finish. Every document is checked:
an active task reported ``restoring`` always carries its changelog progress with captured
end offsets, so ``RestorationProgress`` is never pending. The test fails on the race the
stream thread's ``tasks_lock`` closes (a task visible as restoring before its changelog
offsets were looked up, or after its progress was dropped but before it ran).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreams, KafkaStreamsState
from airflow_stateful_provider.streams.status.application import build_application_status
from airflow_stateful_provider.streams.status.collector import status_document_from_instance
from airflow_stateful_provider.streams.status.document import InstanceStatus
from tests.integration.topologies import configured_counts
from tools.changelog_state import fill_counts_changelog
from tools.kafka.topics import create_topics
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

PARTITIONS = 4
RECORDS = 80_000


class DocumentWatcher(threading.Thread):
    """Builds and checks documents of the given instances until stopped."""

    def __init__(self, instances: dict[str, KafkaStreams]) -> None:
        super().__init__(name="document-watcher", daemon=True)
        self.instances = instances
        self.stopping = threading.Event()
        self.documents = 0
        self.restoring_seen: list[tuple[str, int, int]] = []  # (task, restored, total)
        self.violations: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                for instance_id, streams in list(self.instances.items()):
                    self.check(instance_id, status_document_from_instance(streams, instance_id, 1))
                # Leave the stream threads the interpreter: a tight loop would slow them tenfold.
                time.sleep(0.001)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def check(self, instance_id: str, raw: dict) -> None:
        document = InstanceStatus.from_dict(raw, key=instance_id)
        self.documents += 1
        for task in document.tasks:
            if task.role == "active" and task.state == "restoring":
                if not task.changelogs or any(c.end_offset is None for c in task.changelogs):
                    self.violations.append(f"{instance_id} {task}")
        status = build_application_status([document], {}, document.published_at)
        for task in status.restoring_tasks:
            r = task.restoration
            if r is None or r.pending:
                self.violations.append(f"{instance_id} {task}")
            else:
                self.restoring_seen.append((task.task_id, r.restored, r.total))


def test_restoring_tasks_always_carry_their_progress_through_restore_and_rebalance(bootstrap_servers, tmp_path):
    app_id = f"consistency-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap_servers, {f"{app_id}-in": PARTITIONS, f"{app_id}-out": PARTITIONS})
    ends = fill_counts_changelog(bootstrap_servers, app_id, PARTITIONS, RECORDS)

    def config(name: str) -> StreamsConfig:
        return StreamsConfig(application_id=app_id, bootstrap_servers=bootstrap_servers,
                             state_dir=str(tmp_path / name), commit_interval_ms=200, num_standby_replicas=1,
                             # every client counts as caught up: tasks move to the joining instance at once
                             acceptable_recovery_lag=10**9,
                             consumer_configs={"session_timeout_ms": 10_000},
                             app_configs={"input": f"{app_id}-in", "output": f"{app_id}-out"})

    def all_running(*instances: KafkaStreams) -> bool:
        if not all(s.state is KafkaStreamsState.RUNNING for s in instances):
            return False
        tasks = [t for s in instances for thread in s.threads for t in thread.tasks.values()]
        return len(tasks) == PARTITIONS and all(t.state.value == "RUNNING" for t in tasks)

    first_config, second_config = config("a"), config("b")
    first = KafkaStreams(configured_counts(first_config), first_config)
    second = KafkaStreams(configured_counts(second_config), second_config)
    watcher = DocumentWatcher({"i-1": first})
    watcher.start()
    try:
        first.start()
        waited = wait_until(lambda: all_running(first), 120, "the first instance restored and running")
        print(f"first instance running after {waited:.1f}s")
        # The second instance joins: tasks move to it (restoring from the changelog), the
        # first keeps standbys, and standbys are promoted as the assignor balances.
        watcher.instances["i-2"] = second
        second.start()
        waited = wait_until(lambda: all_running(first, second) and all(s.threads[0].tasks for s in (first, second)),
                            120, "both instances running with tasks")
        print(f"both running after {waited:.1f}s more; {watcher.documents} documents checked")
    finally:
        watcher.stopping.set()
        watcher.join(30)
        first.close(timeout=30)
        second.close(timeout=30)

    assert watcher.error is None, repr(watcher.error)
    assert not watcher.violations, f"{len(watcher.violations)} document(s) with a restoring task without " \
                                   f"progress, first: {watcher.violations[0]}"
    # The watcher saw restorations: each measured against its partition's prepared changelog
    # (the whole of it, or the part after a checkpoint), some caught part-way through.
    assert watcher.restoring_seen, f"no restoring task in {watcher.documents} documents"
    for task_id, restored, total in watcher.restoring_seen:
        assert 0 <= restored <= total <= ends[int(task_id.split("_")[1])], (task_id, restored, total, ends)
    assert any(total == ends[int(task_id.split("_")[1])] and 0 < restored < total
               for task_id, restored, total in watcher.restoring_seen), watcher.restoring_seen[:20]
