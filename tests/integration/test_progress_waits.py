"""tools/waits.py, the waits on progress, against a real instance: a hung instance (SIGSTOP:
alive, doing nothing) fails the wait once its committed offsets stood still for the stall
limit, with the offsets seen and its log; the same wait passes once it runs again."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from tools.instances import InstanceProcess
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, numbered_records, produce
from tools.waits import wait_for_commits

pytestmark = pytest.mark.kafka

RECORDS = 2_000
STALL_S = 5


def test_a_hung_instance_fails_the_wait_after_the_stall_limit_and_a_running_one_passes(bootstrap_servers, tmp_path):
    app = f"progress-{uuid.uuid4().hex[:8]}"
    source, sink = f"{app}-in", f"{app}-out"
    create_topics(bootstrap_servers, {source: 2, sink: 2})
    produce(bootstrap_servers, source, numbered_records(0, RECORDS, 50), linger_ms=20)
    ends = end_offsets(bootstrap_servers, source)
    config = {"application_id": app, "bootstrap_servers": bootstrap_servers, "state_dir": str(tmp_path / "state"),
              "commit_interval_ms": 200, "app_configs": {"input": source, "output": sink}}
    instance = InstanceProcess("tests.integration.topologies:configured_counts", config, tmp_path, "hung").start()
    try:
        instance.process.send_signal(signal.SIGSTOP)  # before it could commit anything
        started = time.monotonic()
        with pytest.raises(AssertionError) as failure:
            wait_for_commits(lambda: committed_offsets(bootstrap_servers, app, source), ends,
                             "the hung instance to commit every record", [instance], stall=STALL_S)
        assert STALL_S <= time.monotonic() - started < STALL_S + 30
        message = str(failure.value)
        assert message.startswith(f"no progress for {STALL_S}s waiting for the hung instance to commit every "
                                  f"record: committed offsets + restored changelog records stayed at 0"), message
        assert f"committed offsets {{}}, target {ends}" in message and "----- hung" in message, message

        instance.process.send_signal(signal.SIGCONT)
        wait_for_commits(lambda: committed_offsets(bootstrap_servers, app, source), ends,
                         "the resumed instance to commit every record", [instance])
        assert instance.stop() == 0, instance.log_tail()
    finally:
        instance.process.send_signal(signal.SIGCONT)
        instance.ensure_stopped()
