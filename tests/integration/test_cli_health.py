"""``stateful-streams status --check`` and ``--watch`` against a real broker, run as the
installed command with the Kafka settings of an Airflow connection (``--conn-id``).

Two applications publish documents through real StatusPublishers: one healthy (fresh
instances running every task, standbys caught up), one not (an instance that stopped
publishing two minutes ago, a task only a standby holds). ``--check`` must answer 0 and 1,
with the reasons on one line of stderr; ``--watch`` into a pipe must append stamped tables
without escape codes and stop cleanly on Ctrl-C.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.status.publisher import StatusPublisher, ensure_status_topic
from tests.integration.test_cli_errors import clean_environment
from tests.unit.streams.status.status_documents import changelog, document, task

pytestmark = pytest.mark.kafka

COMMAND = str(Path(sys.executable).parent / "stateful-streams")


@pytest.fixture
def env(bootstrap_servers):
    return {**clean_environment(), "AIRFLOW_CONN_KAFKA": json.dumps({"conn_type": "stateful_streams",
                                                                     "host": bootstrap_servers})}


def publish(bootstrap_servers: str, app: str, instance_id: str, doc: dict, *, age_ms: int = 0) -> None:
    """One document of ``instance_id``, stamped ``age_ms`` in the past, on the broker."""
    publisher = StatusPublisher(app, instance_id, lambda: doc, bootstrap_servers=bootstrap_servers,
                                clock=lambda: wall_clock_ms() - age_ms)
    try:
        publisher.publish()
        publisher.flush()
    finally:
        publisher.close(clean=False)  # a dirty close republishes the same document, no tombstone


def healthy_application(bootstrap_servers: str) -> str:
    from kafka import KafkaAdminClient

    app = f"healthy-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        ensure_status_topic(admin, app)
    finally:
        admin.close()
    cl = f"{app}-counts-changelog"
    publish(bootstrap_servers, app, "i-1", document("i-1", task("0_0"), task("0_1", "standby", "running",
                                                                               changelog(1, 0, 0, 0, topic=cl)),
                                                    app=app))
    publish(bootstrap_servers, app, "i-2", document("i-2", task("0_1"), task("0_0", "standby", "running",
                                                                               changelog(0, 0, 0, 0, topic=cl)),
                                                    app=app))
    return app


def test_check_answers_healthy_then_unhealthy(bootstrap_servers, env):
    app = healthy_application(bootstrap_servers)
    healthy = subprocess.run([COMMAND, "status", app, "--check", "--conn-id", "kafka", "--max-standby-lag", "0",
                              "--stale-after", "90"], capture_output=True, text=True, timeout=120, env=env)
    assert (healthy.returncode, healthy.stderr) == (0, ""), healthy
    assert healthy.stdout == f"OK: application {app}: 2 instance(s), 2 task(s): 2 running\n"

    # i-2 stops publishing (its last document is ten minutes old) and 0_2 is held by a standby
    # only; i-1 and i-3 publish now and stay fresh for the whole check (bound 90 s), however long
    # the command takes to start on a busy machine
    publish(bootstrap_servers, app, "i-1", document("i-1", task("0_0"), app=app))
    publish(bootstrap_servers, app, "i-2", document("i-2", task("0_1"), app=app), age_ms=600_000)
    publish(bootstrap_servers, app, "i-3", document("i-3", task("0_2", "standby", "running"), app=app))
    sick = subprocess.run([COMMAND, "status", app, "--check", "--conn-id", "kafka", "--stale-after", "90"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert sick.returncode == 1, sick
    assert sick.stdout.startswith(f"UNHEALTHY: application {app}: 3 instance(s), 3 task(s)"), sick
    (line,) = sick.stderr.splitlines()
    assert line.startswith("unhealthy: instance i-2@host-i-2 is stale: last status 10m"), line
    assert "no instance runs task(s) 0_2" in line and "only a stale instance claims task(s) 0_1" in line, line
    assert "Traceback" not in sick.stdout + sick.stderr


def test_watch_into_a_pipe_appends_and_stops_on_ctrl_c(bootstrap_servers, env):
    app = healthy_application(bootstrap_servers)
    process = subprocess.Popen([COMMAND, "status", app, "--watch", "0.3", "--conn-id", "kafka"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    try:
        while sum(line.startswith("--- ") for line in lines) < 3:
            # each refresh is a status read (well under a second); 60 s without a line is a hang
            ready, _, _ = select.select([process.stdout], [], [], 60)
            assert ready, f"no output for 60 s; so far: {lines}"
            line = process.stdout.readline()
            assert line, f"the watch ended: {lines} {process.stderr.read()}"
            lines.append(line)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = "".join(lines) + out
    assert process.returncode == 0, (text, err)
    assert text.count(f"application {app}: 2 instance(s)") >= 2, text
    assert "\x1b" not in text and err == "", (text, err)
