"""An instance process that hangs must say where: SIGUSR1 makes the runner write every
thread's stack to its log (faulthandler) and the instance goes on running; SIGTERM then still
stops it cleanly."""

from __future__ import annotations

import signal
import uuid

import pytest

from tools.instances import InstanceProcess
from tools.kafka.topics import create_topics
from tools.waits import wait_until

pytestmark = pytest.mark.kafka


def test_sigusr1_writes_every_threads_stack_and_the_instance_runs_on(bootstrap_servers, tmp_path):
    app = f"stack-dump-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {f"{app}-in": 1, f"{app}-out": 1})
    instance = InstanceProcess("tests.integration.topologies:configured_counts", {
        "application_id": app, "bootstrap_servers": bootstrap_servers, "state_dir": str(tmp_path / "state"),
        "app_configs": {"input": f"{app}-in", "output": f"{app}-out"}}, tmp_path, "instance").start()
    try:
        wait_until(lambda: (instance.check_alive(), "REBALANCING -> RUNNING" in instance.log_path.read_text())[1],
                   60, "the instance to run", instance.log_tail)
        instance.process.send_signal(signal.SIGUSR1)

        def dump() -> str:
            return instance.log_path.read_text().split("REBALANCING -> RUNNING")[-1]

        # faulthandler writes the newest thread first and the main thread (waiting in
        # InstanceHost.run) last: the dump is whole once host.py is in it. Waiting for the
        # stream thread alone read a dump still being written (a suite run, 2026-11-29).
        wait_until(lambda: "host.py" in dump(), 30, "the main thread's stack in the log's dump", instance.log_tail)
        assert "Thread 0x" in dump() and "stream_thread.py" in dump() and "in run" in dump(), dump()[-3000:]
        instance.check_alive()
        assert instance.stop() == 0, instance.log_tail()
        assert "RUNNING -> PENDING_SHUTDOWN" in instance.log_path.read_text()
    finally:
        instance.ensure_stopped()
