"""The retention model test against the real broker, with a small budget (issue 34): random
interleavings of clicks (in and out of order, three users), ``enforce_retention`` at random
``now`` through the control topic, clean restarts and restarts on a wiped state directory,
run by an instance process under exactly-once. Oracle: a reference run of the same inputs
and maintenance on the TopologyTestDriver, with no restart. The read_committed output (as a
multiset of records and as the final table) and the final session store must be equal.

Every click goes to input partition 0, so one task holds every session and the order of
records and commands is the order the test sends them (each waited for: committed, or
answered). Timestamps stay within the last day (the session changelog keeps a day plus the
retention).
"""

from __future__ import annotations

import collections
import shutil
import time
import types

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from airflow_stateful_provider.streams.control.commands import new_command
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.state.store_dir import open_store
from airflow_stateful_provider.streams.testing import TopologyTestDriver
from tests.integration.test_control_topic import STORE, Cluster, click_records, control_sessions, send_and_wait
from tools.kafka.topics import committed_offsets, end_offsets, produce, read_all
from tools.waits import wait_for_commits

pytestmark = pytest.mark.kafka

GAP = 300_000
HOUR = 3_600_000
USERS = ("u1", "u2", "u3")
BASE = (int(time.time() * 1000) - 20 * HOUR) // 1000 * 1000


@st.composite
def scenarios(draw):
    ops, clock, restarts = [], BASE, 0
    for _ in range(draw(st.integers(4, 9))):
        kind = draw(st.sampled_from(["click", "click", "click", "maintain", "restart", "quiet"]))
        if kind == "quiet":
            clock += draw(st.sampled_from([GAP, 3 * HOUR]))
        elif kind == "maintain":
            ops.append(("maintain", clock + draw(st.sampled_from([-GAP, 0, GAP, HOUR, 6 * HOUR]))))
        elif kind == "restart" and restarts < 2:
            restarts += 1
            ops.append(("restart", draw(st.booleans())))
        elif kind == "click":
            clock += draw(st.integers(0, GAP))
            late = draw(st.sampled_from([0, 0, GAP // 2, 2 * GAP, 3 * HOUR]))
            ops.append(("click", draw(st.sampled_from(USERS)), clock - late))
    return ops


def reference(ops, app_configs):
    """The TopologyTestDriver, no restart: (output records, final table, store)."""
    topology = control_sessions(types.SimpleNamespace(app_configs=app_configs)).build()
    with TopologyTestDriver(topology, {"statestore_cache_max_bytes": 0}, store_type="rocksdb") as driver:
        clicks = driver.create_input_topic(app_configs["input"], Serdes.string(), Serdes.string())
        out = driver.create_output_topic(app_configs["output"], Serdes.string(), Serdes.int64())
        for op in ops:
            if op[0] == "click":
                clicks.pipe_input(op[1], "click", op[2])
            elif op[0] == "maintain":
                driver.enforce_retention(op[1])
        records = [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]
        store = sorted((w.key, w.window.start, w.window.end, v) for w, v in driver.get_session_store(STORE).all())
    return records, store


def run_on_the_broker(cluster: Cluster, ops):
    cluster.start("a")
    cluster.wait_running("a")
    for op in ops:
        if op[0] == "click":
            produce(cluster.bootstrap_servers, cluster.input, click_records([(op[1], op[2])]), partition=0)
            ends = end_offsets(cluster.bootstrap_servers, cluster.input)
            wait_for_commits(lambda: committed_offsets(cluster.bootstrap_servers, cluster.app, cluster.input), ends,
                             "the click committed", context=cluster.logs)
        elif op[0] == "maintain":
            outcome = send_and_wait(cluster, new_command(cluster.app, "enforce_retention", now_ms=op[1]),
                                    instances=("a",), timeout_ms=60_000)
            assert outcome.succeeded, (outcome, cluster.logs())
        else:
            assert cluster.instances["a"].stop() == 0, cluster.logs()
            if op[1]:
                shutil.rmtree(cluster.state_dir("a"), ignore_errors=True)
            cluster.start("a")
            cluster.wait_running("a")
    assert cluster.instances["a"].stop() == 0, cluster.logs()
    records = [(r.key.decode(), None if r.value is None else int.from_bytes(r.value, "big", signed=True),
                r.timestamp) for r in read_all(cluster.bootstrap_servers, cluster.output)]
    with open_store(cluster.state_dir("a") / cluster.app / "0_0" / STORE, read_only=True) as store:
        stored = sorted((s.key.decode(), s.start, s.end, int.from_bytes(v, "big", signed=True))
                        for s, v in store.all())
    return records, stored


@settings(max_examples=5, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(ops=scenarios())
def test_the_broker_run_with_restarts_equals_the_reference(bootstrap_servers, tmp_path_factory, ops):
    cluster = Cluster(bootstrap_servers, tmp_path_factory.mktemp("model"), "model", commit_interval_ms=200,
                      processing_guarantee="exactly_once_v2")
    try:
        records, stored = run_on_the_broker(cluster, ops)
    finally:
        cluster.kill_all()
    expected_records, expected_store = reference(ops, {"input": cluster.input, "output": cluster.output})
    assert collections.Counter(records) == collections.Counter(expected_records), ops
    assert stored == expected_store, ops
