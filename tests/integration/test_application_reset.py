"""``stateful-streams reset`` (the installed command) against a real broker and a real
application: a letter count (a repartition topic, a changelog, a sink) run in this process
over input records of two ages, two hours old and ten minutes old.

- While the application runs, the reset (dry run or ``--execute``) is refused, exit 1, and
  nothing changes: the topics, the committed offsets, the state directory.
- Stopped, a dry run prints the plan and changes nothing.
- ``--execute`` leaves no internal topic of the application (changelog, repartition, status,
  control, query topics), puts the committed offsets where asked (earliest, a datetime, now
  minus a duration: checked against the records' own timestamps read back from the topic),
  removes the local state, and keeps the input and sink topics.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from airflow_stateful_provider.streams import (
    Consumed,
    Grouped,
    KafkaStreams,
    KafkaStreamsState,
    Materialized,
    Produced,
    StreamsBuilder,
    StreamsConfig,
)
from tests.integration.test_cli_errors import clean_environment
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, produce
from tools.waits import wait_for_commits, wait_until

pytestmark = pytest.mark.kafka

COMMAND = str(Path(sys.executable).parent / "stateful-streams")
HOUR_MS = 3_600_000
RECORDS_PER_AGE = 20


def topics(servers: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def records_with_timestamps(servers: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """(offset, timestamp) of every record, by partition."""
    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: dict[int, list[tuple[int, int]]] = {tp.partition: [] for tp in tps}
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "reading the input back took over 60 s"
            for tp, batch in consumer.poll(timeout_ms=500).items():
                out[tp.partition] += [(r.offset, r.timestamp) for r in batch]
        return out
    finally:
        consumer.close()


class Application:
    """The letter count of ``app`` over ``source``, in this process."""

    def __init__(self, servers: str, tmp_path: Path) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.servers, self.app = servers, f"reset-{suffix}"
        self.source, self.sink = f"reset-in-{suffix}", f"reset-out-{suffix}"
        self.state_dir = tmp_path / "state"
        create_topics(servers, {self.source: 2, self.sink: 1})
        now = int(time.time() * 1000)
        old = [(f"k{n}", f"apple{n}", now - 2 * HOUR_MS + n) for n in range(RECORDS_PER_AGE)]
        recent = [(f"k{n}", f"banana{n}", now - 10 * 60_000 + n) for n in range(RECORDS_PER_AGE)]
        produce(servers, self.source, old + recent)
        builder = StreamsBuilder()
        (builder.stream(self.source, Consumed.with_("string", "string"))
         .group_by(lambda key, value: value[:1], Grouped.with_("string", "string"))
         .count(Materialized.as_("letter-counts"))
         .to_stream()
         .to(self.sink, Produced.with_("string", "int64")))
        self.streams = KafkaStreams(builder.build(), StreamsConfig(
            application_id=self.app, bootstrap_servers=servers, state_dir=str(self.state_dir),
            commit_interval_ms=200, status_interval_ms=300))

    def run_until_committed(self) -> None:
        self.streams.start()
        wait_until(lambda: self.streams.state is KafkaStreamsState.RUNNING, 120, "the application RUNNING")
        wait_for_commits(lambda: committed_offsets(self.servers, self.app, self.source),
                         end_offsets(self.servers, self.source), "the input committed")

    def stop(self) -> None:
        self.streams.close(timeout=60)

    def internal_topics(self) -> set[str]:
        return {t for t in topics(self.servers) if t.startswith(f"{self.app}-")}

    def committed(self) -> dict[int, int]:
        return committed_offsets(self.servers, self.app, self.source)

    def reset(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([COMMAND, "reset", self.app, "--bootstrap-servers", self.servers, *args],
                              capture_output=True, text=True, timeout=180, env=clean_environment())


@pytest.fixture
def application(bootstrap_servers, tmp_path):
    app = Application(bootstrap_servers, tmp_path)
    try:
        yield app
    finally:
        app.stop()


def test_refused_while_live_and_a_dry_run_changes_nothing(application):
    application.run_until_committed()
    internal = application.internal_topics()
    assert {f"{application.app}-letter-counts-changelog", f"{application.app}-status", f"{application.app}-control",
            f"{application.app}-queries", f"{application.app}-query-answers"} <= internal
    assert any(t.endswith("-repartition") for t in internal)
    committed = application.committed()
    assert sum(committed.values()) == 2 * RECORDS_PER_AGE

    for args in ((), ("--execute", "--state-dir", str(application.state_dir))):
        refused = application.reset(*args)
        assert refused.returncode == 1, refused
        assert refused.stdout.startswith(f"REFUSED: reset of application '{application.app}'")
        assert f"live instance(s) in '{application.app}-status'" in refused.stdout
        assert "error: application" in refused.stderr and "is running; nothing was changed" in refused.stderr
        assert application.internal_topics() == internal and application.committed() == committed
        assert (application.state_dir / application.app).is_dir()

    application.stop()
    wait_until(lambda: application.reset().returncode == 0, 60, "the reset accepted once the application stopped")
    dry = application.reset("--state-dir", str(application.state_dir), "--json")
    assert dry.returncode == 0, dry
    plan = json.loads(dry.stdout)
    assert plan["executed"] is False and plan["refused"] == []
    assert set(plan["topics_to_delete"]) == internal
    assert {(o["topic"], o["partition"], o["current"], o["target"]) for o in plan["offsets"]} == {
        (application.source, p, offset, 0) for p, offset in committed.items()}
    assert plan["state_dirs_to_remove"] == [str(application.state_dir / application.app)]
    assert application.internal_topics() == internal and application.committed() == committed
    assert (application.state_dir / application.app).is_dir()


@pytest.mark.parametrize("where", ["earliest", "by-duration", "to-datetime"])
def test_execute_leaves_no_internal_topic_and_the_offsets_where_asked(application, where):
    application.run_until_committed()
    application.stop()
    kept = {application.source, application.sink}
    cutoff_ms = int(time.time() * 1000) - HOUR_MS  # between the two ages of input
    args = {"earliest": ["--to-earliest"], "by-duration": ["--by-duration", "PT1H"],
            "to-datetime": ["--to-datetime", datetime.fromtimestamp(cutoff_ms / 1000, tz=UTC).isoformat()]}[where]
    done = application.reset(*args, "--state-dir", str(application.state_dir), "--execute")
    assert done.returncode == 0, done
    assert done.stdout.startswith(f"reset of application '{application.app}': done")
    assert application.internal_topics() == set()
    assert kept <= topics(application.servers)
    expected = {}
    for partition, records in records_with_timestamps(application.servers, application.source).items():
        if where == "earliest":
            expected[partition] = records[0][0] if records else 0
        else:
            expected[partition] = next((offset for offset, ts in records if ts >= cutoff_ms),
                                       records[-1][0] + 1 if records else 0)
    assert expected and application.committed() == expected
    if where != "earliest":
        assert sum(expected.values()) > 0  # the two-hour-old records are skipped: not the earliest
    assert not (application.state_dir / application.app).exists()
    assert application.state_dir.is_dir()


def test_the_operator_resets_a_stopped_application(application, monkeypatch):
    """ResetApplicationOperator on the application's connection: by_duration=3600 is an hour
    (seconds, Airflow's convention); the plan on XCom matches what the broker shows."""
    from airflow_stateful_provider.operators.reset import ResetApplicationOperator

    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT",
                       json.dumps({"conn_type": "stateful_streams", "host": application.servers}))
    application.run_until_committed()
    application.stop()
    cutoff_ms = int(time.time() * 1000) - HOUR_MS
    result = ResetApplicationOperator(task_id="reset", application_id=application.app, by_duration=3600,
                                      state_dir=str(application.state_dir), timeout=60).execute({})
    assert result["executed"] is True and result["refused"] == []
    assert application.internal_topics() == set()
    expected = {partition: next(offset for offset, ts in records if ts >= cutoff_ms)
                for partition, records in records_with_timestamps(application.servers, application.source).items()
                if records}
    assert application.committed() == expected == {o["partition"]: o["target"] for o in result["offsets"]}
    assert not (application.state_dir / application.app).exists()


def test_an_unknown_application_and_bad_arguments_are_named(bootstrap_servers, tmp_path):
    def reset(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([COMMAND, "reset", *args, "--bootstrap-servers", bootstrap_servers],
                              capture_output=True, text=True, timeout=120, env=clean_environment())

    before = topics(bootstrap_servers)
    unknown = reset("never-started-app")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.startswith("error: unknown application 'never-started-app': no internal topic, no "
                                     "committed offsets")
    bad = reset("never-started-app", "--by-duration", "1h")
    assert bad.returncode == 2 and "by_duration must be an ISO-8601 duration such as 'PT1H'" in bad.stderr
    naive = reset("never-started-app", "--to-datetime", "2026-01-01T00:00:00")
    assert naive.returncode == 2 and "has no UTC offset" in naive.stderr
    no_dir = reset("never-started-app", "--state-dir", str(tmp_path / "nope"))
    assert no_dir.returncode == 2 and "is not a directory" in no_dir.stderr
    # nothing created (the broker's own __consumer_offsets appears on a fresh broker once a group is looked up)
    assert {t for t in topics(bootstrap_servers) if not t.startswith("__")} == {t for t in before
                                                                                 if not t.startswith("__")}
