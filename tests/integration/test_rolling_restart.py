"""A rolling restart on a real broker (docs/rolling-restart.md): two instance processes with
one standby each, input flowing; ``stateful-streams restart --rolling`` restarts them one
at a time, and no partition's processing pauses longer than the documented bound."""

from __future__ import annotations

import io
import uuid
from itertools import pairwise

import pytest

from airflow_stateful_provider.cli import main as cli_main
from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.status.reader import fetch_application_status
from tests.integration.test_high_availability import SteadyProducer, instance_config
from tools.instances import InstanceProcess
from tools.kafka.topics import create_topics, read_all
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

#: The documented bound (docs/rolling-restart.md) of the longest pause of one partition's
#: output while the instances restart one at a time: the session timeout, which a member that
#: did not leave the group cleanly (or tasks left without an owner) would make the pause exceed.
SESSION_TIMEOUT_MS = 6_000
PAUSE_BOUND_S = SESSION_TIMEOUT_MS / 1000


def test_rolling_restart_keeps_every_partition_processing_within_the_bound(bootstrap_servers, tmp_path):
    app = f"rolling-{uuid.uuid4().hex[:8]}"
    topic_in, topic_out = f"{app}-in", f"{app}-out"
    # the output's append time is when the owner produced it: a gap there is a processing pause
    create_topics(bootstrap_servers, {topic_in: 2, topic_out: 2},
                  configs={topic_out: {"message.timestamp.type": "LogAppendTime"}})
    settings = {"app_configs": {"input": topic_in, "output": topic_out},
                "consumer_configs": {"session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": 300}}
    instances = {name: InstanceProcess("tests.integration.topologies:configured_counts",
                                       instance_config(app, bootstrap_servers, tmp_path, name, **settings),
                                       tmp_path, name)
                 for name in ("instance-0", "instance-1")}
    producer = SteadyProducer(bootstrap_servers, topic_in, total=100_000, per_second=200)
    out = io.StringIO()
    try:
        for instance in instances.values():
            instance.start()
        producer.start()

        def standbys_caught_up() -> bool:
            for instance in instances.values():
                instance.check_alive()
            try:
                status = fetch_application_status(bootstrap_servers, app)
            except Exception:  # noqa: BLE001 - not published yet
                return False
            return len(status.tasks) == 2 and all(
                t.state == "running" and t.active and len(t.standbys) == 1 and t.standbys[0].lag is not None
                and t.standbys[0].instance_id != t.active.instance_id for t in status.tasks)
        wait_until(standbys_caught_up, 30, "2 running tasks, each with a standby on the other instance",
                   lambda: instances["instance-0"].log_tail(20) + instances["instance-1"].log_tail(20))
        started_ms = wall_clock_ms()
        code = cli_main(["restart", app, "--rolling", "--bootstrap-servers", bootstrap_servers,
                         "--step-timeout", "30", "--stale-after", "5"], out=out)
        ended_ms = wall_clock_ms()
        assert code == 0, out.getvalue()
        for instance in instances.values():
            instance.check_alive()  # restarted inside the same process
        after = fetch_application_status(bootstrap_servers, app)

        def output_after_the_restart() -> bool:
            latest: dict[int, int] = {}
            for record in read_all(bootstrap_servers, topic_out):
                latest[record.partition] = max(latest.get(record.partition, 0), record.timestamp)
            return len(latest) == 2 and min(latest.values()) > ended_ms
        wait_until(output_after_the_restart, 30, "output on both partitions after the restart (closes the last gap)")
    finally:
        producer.total = producer.sent
        for instance in instances.values():
            instance.ensure_stopped()

    text = out.getvalue()
    print(text)
    assert {i.instance_id: i.epoch for i in after.instances} == {"instance-0": 1, "instance-1": 1}, text
    assert "instance-0: back as epoch 1" in text and "instance-1: back as epoch 1" in text, text
    times: dict[int, list[int]] = {0: [], 1: []}
    for record in read_all(bootstrap_servers, topic_out):
        times[record.partition].append(record.timestamp)
    pauses = {}
    for partition, stamps in times.items():
        window = sorted(t for t in stamps if started_ms - 1_000 <= t)
        assert window and window[-1] > ended_ms, f"partition {partition}: no output after the restart"
        pauses[partition] = max(b - a for a, b in pairwise(window)) / 1000
    print(f"longest pause per partition during the rolling restart ({(ended_ms - started_ms) / 1000:.1f}s): "
          + ", ".join(f"{p}: {s:.2f}s" for p, s in pauses.items()))
    assert all(s < PAUSE_BOUND_S for s in pauses.values()), pauses
