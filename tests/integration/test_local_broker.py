"""The local broker tooling against a real JVM: failures are explained and leave no process behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tools.kafka.broker import BrokerError, LocalKafkaBroker, resolve_jars
from tools.waits import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.kafka


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent's wait() is missing.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"




def test_second_resolve_reuses_jars_without_maven(monkeypatch):
    lib = resolve_jars()
    monkeypatch.setenv("PATH", "/nonexistent")  # no mvn: must not be needed again
    assert resolve_jars() == lib
    assert any(jar.name.startswith("kafka_2.13-4.") for jar in lib.glob("*.jar"))


def test_cluster_id_starting_with_a_dash_formats(tmp_path, monkeypatch):
    from tools.kafka import broker as broker_tools

    monkeypatch.setattr(broker_tools, "_random_cluster_id", lambda: "-AAAAAAAAAAAAAAAAAAAAA")
    broker = LocalKafkaBroker(tmp_path / "k").start()
    broker.stop()


def test_port_in_use_is_refused_with_the_port(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerError, match=f"port {port} on 127.0.0.1 is already in use"):
            LocalKafkaBroker(tmp_path / "k", port=port).start()


def test_failed_start_shows_the_log_tail_and_leaves_no_process(tmp_path):
    broker = LocalKafkaBroker(tmp_path / "k", heap="1k")  # the JVM refuses a 1 KiB heap
    with pytest.raises(BrokerError) as info:
        broker.start()
    assert "heap" in str(info.value).lower()
    assert broker.process is None


def test_broker_dies_with_the_python_process_that_started_it(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        from tools.kafka.broker import LocalKafkaBroker
        broker = LocalKafkaBroker({str(tmp_path / 'k')!r}).start()
        print(broker.process.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        java_pid = int(parent.stdout.readline())
        assert _alive(java_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(lambda: not _alive(java_pid), 30, f"broker pid {java_pid} to end with its parent", interval=0.1)
    finally:
        parent.kill()


def test_stop_terminates_and_restart_gets_fresh_storage(tmp_path):
    broker = LocalKafkaBroker(tmp_path / "k").start()
    pid = broker.process.pid
    marker = tmp_path / "k" / "data" / "leftover"
    marker.write_text("x")
    broker.stop()
    assert not _alive(pid)
    broker.start()
    try:
        assert not marker.exists()
    finally:
        broker.stop()


def test_a_topic_keeps_records_of_any_age(bootstrap_servers):
    """Tests write fixed timestamps (1970, 2023): the broker's retention check must not delete
    them while a test runs (it did, 30 s after the start or 5 minutes later)."""
    from tools.kafka.topics import create_topics, produce, read_all, topic_configs

    topic = f"ages-{os.getpid()}-{time.monotonic_ns()}"
    create_topics(bootstrap_servers, {topic: 1})
    assert topic_configs(bootstrap_servers, topic)["retention.ms"] == "-1"
    produce(bootstrap_servers, topic, [("k", "v", 100)], partition=0)
    assert [(r.key, r.timestamp) for r in read_all(bootstrap_servers, topic)] == [(b"k", 100)]


def test_a_broker_starts_on_the_class_archive_resolve_made(tmp_path):
    """``resolve`` (make jars) leaves an archive of the broker's classes; a broker started
    afterwards maps it (the JVM silently starts without an archive it cannot use)."""
    from tools.kafka.broker import build_class_archive

    archive = build_class_archive()
    with LocalKafkaBroker(tmp_path / "k") as broker:
        assert broker.process is not None
        maps = Path(f"/proc/{broker.process.pid}/maps").read_text()
        assert str(archive) in maps, f"the broker did not map {archive}"
