"""State identity and changelog loss on a real broker (docs/runbook.md): a state directory
copied from another application is refused before anything is written, and works once moved
aside; a changelog deleted while the application was stopped stops the restart with
ChangelogLostError and shows the task ``state_lost`` in the status topic, and
``on_changelog_loss="restore_from_changelog"`` rebuilds the state from what the changelog holds.

The topology is ``tests.integration.topologies.json_counts``: a count per key in the
persistent store ``counts``, each new count sent to the output topic.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from airflow_stateful_provider.cli import main as cli_main
from airflow_stateful_provider.streams import (
    ChangelogLostError,
    ForeignStateError,
    KafkaStreams,
    KafkaStreamsState,
    StreamsConfig,
    fetch_application_status,
    open_store,
    read_status_documents,
)
from airflow_stateful_provider.streams.state.common.checkpoint import OffsetCheckpoint
from airflow_stateful_provider.streams.state.common.task_identity import IDENTITY_FILE_NAME, read_identity
from airflow_stateful_provider.streams.status.document_parts import LostChangelogReport
from airflow_stateful_provider.streams.task_id import TaskId
from tests.integration.topologies import json_counts
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, numbered_records, produce, read_all
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

PARTITIONS = 2
KEYS = 6


def config(bootstrap_servers: str, app: str, state_dir: Path, guarantee: str = "at_least_once",
           **overrides) -> StreamsConfig:
    return StreamsConfig(application_id=app, bootstrap_servers=bootstrap_servers, state_dir=str(state_dir),
                         commit_interval_ms=200, consumer_configs={"session_timeout_ms": 10_000},
                         processing_guarantee=guarantee, instance_id=f"{app}-instance", status_interval_ms=300,
                         **overrides)


def run_until_committed(bootstrap_servers: str, streams: KafkaStreams, app: str, topic: str) -> None:
    """Start ``streams``, wait until every record of ``topic`` is committed, close it cleanly."""
    ends = end_offsets(bootstrap_servers, topic)
    streams.start()
    try:
        wait_until(lambda: streams.state is KafkaStreamsState.ERROR
                   or committed_offsets(bootstrap_servers, app, topic) == ends,
                   120, f"{app} to commit {ends}", lambda: f"state {streams.state}, metrics {streams.metrics()}")
        assert streams.state is not KafkaStreamsState.ERROR, [t.error for t in streams.threads]
    finally:
        assert streams.close(timeout=60)


def outputs_per_key(bootstrap_servers: str, topic: str) -> dict[str, list[int]]:
    """Every count sent per key, in the order sent (one key lives on one partition)."""
    found: dict[str, list[int]] = defaultdict(list)
    for record in read_all(bootstrap_servers, topic):
        found[record.key.decode()].append(int.from_bytes(record.value, "big", signed=True))
    return dict(found)


def topics(bootstrap_servers: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def test_a_state_directory_of_another_application_is_refused_until_moved_aside(bootstrap_servers, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    app_a, app_b, source = f"counts-a-{suffix}", f"counts-b-{suffix}", f"in-{suffix}"
    out_a, out_b = f"out-a-{suffix}", f"out-b-{suffix}"
    create_topics(bootstrap_servers, {source: PARTITIONS, out_a: PARTITIONS, out_b: PARTITIONS})
    produce(bootstrap_servers, source, numbered_records(0, 60, KEYS))
    cfg_a = config(bootstrap_servers, app_a, tmp_path / "a")
    run_until_committed(bootstrap_servers, KafkaStreams(json_counts(source, out_a), cfg_a), app_a, source)
    assert outputs_per_key(bootstrap_servers, out_a) == {f"k{i}": list(range(1, 11)) for i in range(KEYS)}

    # Application B, same topology, gets A's task directories; 0_1 loses its identity file,
    # as a directory written by the previous version would have none.
    cfg_b = config(bootstrap_servers, app_b, tmp_path / "b")
    copied = [cfg_b.task_state_dir(TaskId(0, p)) for p in range(PARTITIONS)]
    for partition, target in enumerate(copied):
        shutil.copytree(cfg_a.task_state_dir(TaskId(0, partition)), target)
    os.remove(os.path.join(copied[1], IDENTITY_FILE_NAME))
    checkpoints = [OffsetCheckpoint.in_task_dir(d).read() for d in copied]

    with pytest.raises(ForeignStateError) as refused:
        KafkaStreams(json_counts(source, out_b), cfg_b).start()
    message = str(refused.value)
    assert f"2 task directories are foreign to application '{app_b}'" in message
    assert (f"{copied[0]}: it holds state of application '{app_a}', task 0_0 (store 'counts' logged to "
            f"{app_a}-counts-changelog), expected application '{app_b}', task 0_0 (store 'counts' logged to "
            f"{app_b}-counts-changelog)") in message
    assert f"{copied[1]}: it has no identity file" in message and f"{app_a}-counts-changelog-1" in message
    move = re.search(r"`mv (\S+) (\S+)`", message)
    assert move and move.groups() == (copied[0], copied[0] + ".foreign"), message
    # Refused before anything was created or written for B; the directories are as copied.
    assert f"{app_b}-counts-changelog" not in topics(bootstrap_servers)
    assert end_offsets(bootstrap_servers, out_b) == {p: 0 for p in range(PARTITIONS)}
    assert committed_offsets(bootstrap_servers, app_b, source) == {}
    assert read_identity(copied[0]).application_id == app_a and read_identity(copied[1]) is None
    assert [OffsetCheckpoint.in_task_dir(d).read() for d in copied] == checkpoints

    for directory in copied:  # as the message says
        os.rename(directory, directory + ".foreign")
    run_until_committed(bootstrap_servers, KafkaStreams(json_counts(source, out_b), cfg_b), app_b, source)
    assert outputs_per_key(bootstrap_servers, out_b) == {f"k{i}": list(range(1, 11)) for i in range(KEYS)}
    for directory in copied:
        assert read_identity(directory).application_id == app_b  # B's own, new directories
        assert os.path.isdir(directory + ".foreign")


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_a_changelog_deleted_while_stopped_stops_the_restart_until_the_user_opts_in(
        bootstrap_servers, tmp_path, guarantee):
    suffix = uuid.uuid4().hex[:8]
    app, source, sink = f"lost-{suffix}", f"in-{suffix}", f"out-{suffix}"
    changelog = f"{app}-counts-changelog"
    create_topics(bootstrap_servers, {source: 1, sink: 1})
    produce(bootstrap_servers, source, numbered_records(0, 30, KEYS))  # 5 records per key
    cfg = config(bootstrap_servers, app, tmp_path, guarantee)
    run_until_committed(bootstrap_servers, KafkaStreams(json_counts(source, sink), cfg), app, source)
    task_dir = cfg.task_state_dir(TaskId(0, 0))
    checkpoint = OffsetCheckpoint.in_task_dir(task_dir).read()
    checkpointed = checkpoint[(changelog, 0)]
    assert checkpointed == read_all(bootstrap_servers, changelog)[-1].offset

    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.delete_topics([changelog])
        wait_until(lambda: changelog not in admin.list_topics(), 30, "the changelog's deletion")
    finally:
        admin.close()
    produce(bootstrap_servers, source, numbered_records(30, 12, KEYS))  # 2 more per key
    output_before = read_all(bootstrap_servers, sink)

    # The restart recreates the changelog empty, finds the checkpoint beyond it and stops.
    streams = KafkaStreams(json_counts(source, sink), cfg)
    streams.start()
    try:
        wait_until(lambda: streams.state is KafkaStreamsState.ERROR, 120, "the instance to stop on the lost changelog",
                   lambda: f"state {streams.state}")
        error = next(t.error for t in streams.threads if t.error is not None)
        assert isinstance(error, ChangelogLostError), repr(error)
        assert (f"task 0_0 (active) store 'counts' holds {changelog}-0 up to offset {checkpointed}, but that changelog "
                f"partition now starts at offset 0 and ends at 0") in str(error)
        assert f"its directory ({task_dir}) was left as it is" in str(error)
        assert "on_changelog_loss='restore_from_changelog'" in str(error)

        # close() returns once the error shutdown has sent the last document (state ERROR).
        assert streams.close(timeout=60)
        document = read_status_documents(bootstrap_servers, app)[f"{app}-instance"]
        assert (document.state, document.format_version) == ("ERROR", 2)
        assert [(t.task_id, t.role, t.state, t.lost_changelogs) for t in document.tasks] == [
            ("0_0", "active", "state_lost", (LostChangelogReport(changelog, 0, "counts", checkpointed, 0, 0),))]
        status = fetch_application_status(bootstrap_servers, app)
        assert [t.task_id for t in status.state_lost_tasks] == ["0_0"]
        assert [t.state for t in status.tasks] == ["state_lost"]
        out = io.StringIO()
        assert cli_main(["status", app, "--bootstrap-servers", bootstrap_servers], out=out) == 0
        table = out.getvalue()
        assert "state_lost" in table and "1 STATE LOST" in table, table
        assert (f"STATE LOST on {app}-instance (active): store 'counts' holds {changelog}-0 up to offset "
                f"{checkpointed}, the changelog now starts at 0 and ends at 0") in table, table
    finally:
        streams.close(timeout=60)
    # Nothing was processed or written: same output, same commits, the changelog still empty,
    # the task directory as it was (checkpoint and store).
    assert read_all(bootstrap_servers, sink) == output_before
    assert committed_offsets(bootstrap_servers, app, source) == {0: 30}
    assert end_offsets(bootstrap_servers, changelog) == {0: 0}
    assert OffsetCheckpoint.in_task_dir(task_dir).read() == checkpoint
    with open_store(os.path.join(task_dir, "counts"), read_only=True) as store:
        assert {k.decode(): int.from_bytes(v, "big") for k, v in store.all()} == {f"k{i}": 5 for i in range(KEYS)}

    # Opted in: the store is rebuilt from what the changelog holds now (nothing), so every
    # count starts again from the records after the last commit.
    rebuilt = cfg.with_overrides(on_changelog_loss="restore_from_changelog")
    run_until_committed(bootstrap_servers, KafkaStreams(json_counts(source, sink), rebuilt), app, source)
    after = outputs_per_key(bootstrap_servers, sink)
    assert after == {f"k{i}": [1, 2, 3, 4, 5, 1, 2] for i in range(KEYS)}
    assert OffsetCheckpoint.in_task_dir(task_dir).read() == {(changelog, 0): read_all(bootstrap_servers,
                                                                                     changelog)[-1].offset}
