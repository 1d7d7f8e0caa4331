"""The control topic on a real broker, with instances as OS processes running a session count.

- ``stateful-streams stop``: both instances exit 0, committed offsets equal what they
  processed, checkpoints written, status documents tombstoned; a restart completes the
  output exactly (nothing lost, nothing counted twice).
- ``enforce_retention`` with a future ``now_ms``: "done" from every instance with the
  dropped segments per store; afterwards the stores hold no live segment.
- a command addressed to one instance is answered by it alone; malformed control records
  are skipped; unknown store names fail naming the stores the instance has.
- epoch fencing: a newer epoch in the status topic makes ``start()`` raise.
"""

from __future__ import annotations

import io
import time
import uuid
from pathlib import Path

import pytest

from airflow_stateful_provider.cli import main as cli_main
from airflow_stateful_provider.streams.control.channel import send_command, wait_for_command
from airflow_stateful_provider.streams.control.commands import new_command
from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.errors import FencedInstanceError, UnknownApplicationError
from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreams, KafkaStreamsState
from airflow_stateful_provider.streams.state.store_dir import open_store
from airflow_stateful_provider.streams.status.publisher import StatusPublisher, ensure_status_topic
from airflow_stateful_provider.streams.status.reader import read_status_documents
from airflow_stateful_provider.streams.windows import SessionWindows
from tests.integration.test_crash_recovery import final_sessions as sessions_of
from tests.integration.topologies import SESSION_GAP_MS as GAP_MS
from tests.integration.topologies import session_counts_oracle as oracle
from tools.instances import InstanceProcess
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, produce, read_all
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

STORE = "click-sessions"
PARTITIONS = 2
TOPOLOGY = "tests.integration.test_control_topic:control_sessions"


def control_sessions(config) -> StreamsBuilder:
    """Clicks counted per user session (gap GAP_MS) into the session store STORE; each update
    goes to the output topic keyed "user@start-end" (topics and the changelog's optional
    topic configs from ``app_configs``)."""
    builder = StreamsBuilder()
    (builder.stream(config.app_configs["input"], Consumed.with_("string", "string"))
     .group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(GAP_MS))
     .count(Materialized.as_(STORE).with_logging_enabled(config.app_configs.get("changelog_configs")))
     .to_stream()
     .map(lambda windowed, count: (f"{windowed.key}@{windowed.window.start}-{windowed.window.end}", count))
     .to(config.app_configs["output"], Produced.with_("string", "int64")))
    return builder


def clicks(users: int, per_user: int, start_ms: int) -> list[tuple[str, int]]:
    """Per user, pairs of clicks 10 s apart, pairs 2 gaps apart: ``per_user / 2`` sessions each."""
    out = [(f"user-{u:02d}", start_ms + (i // 2) * 2 * GAP_MS + (i % 2) * 10_000 + u)
           for u in range(users) for i in range(per_user)]
    return sorted(out, key=lambda c: c[1])


def final_sessions(bootstrap_servers: str, topic: str) -> dict[tuple[str, int, int], int]:
    return sessions_of(read_all(bootstrap_servers, topic))


def click_records(events: list[tuple[str, int]]) -> list[tuple[str, bytes, int]]:
    """The records of clicks ``(user, timestamp)``: keyed by user, value ``click``."""
    return [(user, b"click", ts) for user, ts in events]


class Cluster:
    """An application of instance processes "a" and "b" (own state dirs) over fresh topics,
    running ``topology`` ("module:function", ``subtopologies`` of them; default: the session
    count above)."""

    def __init__(self, bootstrap_servers: str, work_dir: Path, prefix: str, *, topology: str = TOPOLOGY,
                 subtopologies: int = 1, **config) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topology, self.subtopologies = topology, subtopologies
        self.app = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.input, self.output = f"{self.app}-clicks", f"{self.app}-sessions"
        create_topics(bootstrap_servers, {self.input: PARTITIONS, self.output: PARTITIONS})
        self.work_dir = work_dir
        self.config = {"application_id": self.app, "bootstrap_servers": bootstrap_servers,
                       "app_configs": {"input": self.input, "output": self.output},
                       "status_interval_ms": 1_000, "statestore_cache_max_bytes": 0,
                       "consumer_configs": {"session_timeout_ms": 10_000}, **config}
        self.instances: dict[str, InstanceProcess] = {}

    def state_dir(self, name: str) -> Path:
        return self.work_dir / f"state-{name}"

    def start(self, *names: str) -> None:
        for name in names:
            config = {**self.config, "instance_id": name, "state_dir": str(self.state_dir(name))}
            process = InstanceProcess(self.topology, config, self.work_dir, f"{name}-{len(self.instances)}")
            self.instances[name] = process
            process.start()

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{p.log_tail(30)}" for name, p in self.instances.items())

    def documents(self) -> dict:
        try:
            return read_status_documents(self.bootstrap_servers, self.app, allow_empty=True)
        except UnknownApplicationError:  # no instance has created the status topic yet
            return {}

    def wait_running(self, *names: str, timeout: float = 60) -> None:
        """Every named instance publishes RUNNING with at least one active task, and the
        actives cover every partition."""
        def ready() -> bool:
            for name in names:
                self.instances[name].check_alive()
            docs = self.documents()
            if any(name not in docs or docs[name].state != "RUNNING" for name in names):
                return False
            actives = {t.task_id for name in names for t in docs[name].tasks if t.role == "active"}
            return all(any(t.role == "active" for t in docs[n].tasks) for n in names) and \
                actives == {f"{s}_{p}" for s in range(self.subtopologies) for p in range(PARTITIONS)}
        wait_until(ready, timeout, f"instances {names} running", self.logs)

    def stop_all(self) -> None:
        for process in self.instances.values():
            if process.alive():
                assert process.stop() == 0, process.log_tail()

    def kill_all(self) -> None:
        for process in self.instances.values():
            process.ensure_stopped()


def send_and_wait(cluster: Cluster, command, instances=("a", "b"), timeout_ms: int = 30_000):
    send_command(cluster.bootstrap_servers, command)
    return wait_for_command(cluster.bootstrap_servers, command, instances=instances, timeout_ms=timeout_ms,
                            poll_interval_ms=200)


# ---------------------------------------------------------------------------- stop


def test_stop_through_the_cli_commits_checkpoints_and_tombstones(bootstrap_servers, tmp_path):
    cluster = Cluster(bootstrap_servers, tmp_path, "ctl-stop", commit_interval_ms=600_000)
    first = clicks(users=10, per_user=6, start_ms=int(time.time() * 1000) - 3_600_000)
    produce(bootstrap_servers, cluster.input, click_records(first), linger_ms=5)
    try:
        cluster.start("a", "b")
        cluster.wait_running("a", "b")
        wait_until(lambda: final_sessions(bootstrap_servers, cluster.output) == oracle(first), 60,
                   "every click of the first batch processed", cluster.logs)
        ends = end_offsets(bootstrap_servers, cluster.input)

        out = io.StringIO()
        code = cli_main(["stop", cluster.app, "--bootstrap-servers", bootstrap_servers, "--timeout", "60"], out=out)
        assert code == 0, out.getvalue() + cluster.logs()
        assert "a: stopped" in out.getvalue() and "b: stopped" in out.getvalue(), out.getvalue()
        for process in cluster.instances.values():
            assert process.process.wait(timeout=30) == 0, process.log_tail()

        # The commit interval is 10 minutes: only the stop committed what was processed.
        assert committed_offsets(bootstrap_servers, cluster.app, cluster.input) == ends
        checkpointed = {path.parent.name for name in ("a", "b")
                        for path in (cluster.state_dir(name) / cluster.app).glob("*/.checkpoint")}
        assert checkpointed == {f"0_{p}" for p in range(PARTITIONS)}
        assert cluster.documents() == {}

        # Nothing lost, nothing counted twice: a restart continues exactly where the stop committed.
        second = clicks(users=10, per_user=4, start_ms=first[-1][1] + 10 * GAP_MS)
        produce(bootstrap_servers, cluster.input, click_records(second), linger_ms=5)
        cluster.start("a")
        wait_until(lambda: final_sessions(bootstrap_servers, cluster.output) == oracle(first + second), 60,
                   "the restarted instance to complete the output",
                   lambda: f"{final_sessions(bootstrap_servers, cluster.output)}\n{cluster.logs()}")
        cluster.stop_all()
    finally:
        cluster.kill_all()


def test_stop_for_an_unknown_application_exits_1(bootstrap_servers):
    code = cli_main(["stop", f"nope-{uuid.uuid4().hex[:6]}", "--bootstrap-servers", bootstrap_servers,
                     "--timeout", "5"], out=io.StringIO())
    assert code == 1


# ---------------------------------------------------------------------------- maintenance


@pytest.fixture(scope="module")
def running(bootstrap_servers, tmp_path_factory):
    """Instances "a" and "b" with one standby each, every click processed and committed."""
    cluster = Cluster(bootstrap_servers, tmp_path_factory.mktemp("control"), "ctl", commit_interval_ms=500,
                      num_standby_replicas=1)
    events = clicks(users=10, per_user=8, start_ms=int(time.time() * 1000) - 3_600_000)
    produce(bootstrap_servers, cluster.input, click_records(events), linger_ms=5)
    cluster.start("a", "b")
    try:
        cluster.wait_running("a", "b")
        ends = end_offsets(bootstrap_servers, cluster.input)
        wait_until(lambda: committed_offsets(bootstrap_servers, cluster.app, cluster.input) == ends, 60,
                   "every click committed", cluster.logs)
        yield cluster
    finally:
        cluster.kill_all()


def test_a_command_for_one_instance_is_answered_by_it_alone(running):
    command = new_command(running.app, "checkpoint", instances=["a"])
    outcome = send_and_wait(running, command, instances=["a"])
    assert outcome.succeeded, (outcome, running.logs())
    assert set(outcome.acknowledgements) == {"a"}
    tasks = outcome.acknowledgements["a"].result["tasks"]
    assert tasks and set(tasks) <= {f"0_{p}" for p in range(PARTITIONS)}
    time.sleep(1.5)  # b publishes at least once more meanwhile
    docs = running.documents()
    assert not [a for a in docs["b"].acknowledgements if a.command_id == command.command_id]


def test_malformed_control_records_are_skipped(running):
    topic = f"{running.app}-control"
    unknown_command = (b'{"format_version": 1, "command_id": "x", "command_type": "reboot", '
                       b'"application_id": "%s", "issued_at_ms": 1}' % running.app.encode())
    produce(running.bootstrap_servers, topic, [(b"junk", value) for value in (b"not json", unknown_command, None)])
    outcome = send_and_wait(running, new_command(running.app, "checkpoint"))
    assert outcome.succeeded, (outcome, running.logs())
    for process in running.instances.values():
        process.check_alive()
        assert "malformed control record skipped" in process.log_path.read_text()
        assert "'reboot'" in process.log_path.read_text()


def test_unknown_store_names_fail_naming_the_stores_the_instance_has(running):
    outcome = send_and_wait(running, new_command(running.app, "compact", stores=["nope"]))
    assert outcome.complete and set(outcome.failed) == {"a", "b"}
    error = outcome.acknowledgements["a"].result["error"]
    assert "'nope'" in error and STORE in error


def test_compact_every_session_store_of_every_task(running):
    outcome = send_and_wait(running, new_command(running.app, "compact"))
    assert outcome.succeeded, (outcome, running.logs())
    rows = [row for ack in outcome.acknowledgements.values() for row in ack.result["stores"]]
    assert {(r["task_id"], r["role"]) for r in rows} == \
        {(f"0_{p}", role) for p in range(PARTITIONS) for role in ("active", "standby")}, rows
    assert all(r["store"] == STORE and r["result"]["bytes_after"] > 0 for r in rows), rows


def test_enforce_retention_drops_every_segment_as_of_a_future_time(running):
    # Last in the module: it moves the stores' stream time into the future.
    future = int(time.time() * 1000) + 365 * 24 * 3_600_000
    outcome = send_and_wait(running, new_command(running.app, "enforce_retention", stores=[STORE], now_ms=future))
    assert outcome.succeeded, (outcome, running.logs())
    rows = [dict(row, instance=i) for i, ack in outcome.acknowledgements.items() for row in ack.result["stores"]]
    assert {(r["task_id"], r["role"]) for r in rows if r["role"] == "active"} == \
        {(f"0_{p}", "active") for p in range(PARTITIONS)}
    assert {r["role"] for r in rows} == {"active", "standby"}, rows
    for row in rows:
        assert row["store"] == STORE
        assert row["result"]["now_ms"] == future
        assert row["result"]["observed_stream_time_after"] == future
    assert all(row["result"]["segments_dropped"] for row in rows if row["role"] == "active"), rows

    running.stop_all()
    for name in ("a", "b"):
        for path in (running.state_dir(name) / running.app).glob(f"*/{STORE}"):
            store = open_store(path, read_only=True)
            try:
                stats = store.stats()
            finally:
                store.close()
            assert stats.live_segments == () and stats.observed_stream_time == future, (path, stats)


# ---------------------------------------------------------------------------- epoch fencing


def test_a_newer_epoch_in_the_status_topic_fences_the_instance(bootstrap_servers, tmp_path):
    from kafka import KafkaAdminClient

    app = f"ctl-fence-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {f"{app}-in": 1, f"{app}-out": 1})
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        ensure_status_topic(admin, app)
    finally:
        admin.close()
    newer = {"format_version": 1, "instance_id": "i-1", "application_id": app, "state": "RUNNING", "epoch": 3,
             "host": "elsewhere", "pid": 1, "process_id": "p", "generation": None,
             "next_probing_rebalance_ms": None, "published_at": 0, "tasks": [], "acknowledgements": []}
    publisher = StatusPublisher(app, "i-1", lambda: newer, bootstrap_servers=bootstrap_servers)
    publisher.close(clean=False)  # not clean: its last document stays, as after a crash

    def instance(epoch: int) -> KafkaStreams:
        builder = StreamsBuilder()
        builder.stream(f"{app}-in").to(f"{app}-out")
        return KafkaStreams(builder.build(), {"application_id": app, "bootstrap_servers": bootstrap_servers,
                                              "state_dir": str(tmp_path), "instance_id": "i-1",
                                              "instance_epoch": epoch})

    fenced = instance(2)
    with pytest.raises(FencedInstanceError, match=r"'i-1'.*epoch 2.*epoch 3") as caught:
        fenced.start()
    assert f"{app}-status" in str(caught.value)
    assert fenced.state is KafkaStreamsState.CREATED

    same = instance(3)
    same.start()
    try:
        assert same.state is not KafkaStreamsState.CREATED
    finally:
        assert same.close(timeout=30)
