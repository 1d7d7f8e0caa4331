"""The retention model test against the real broker, with a small budget (issue 34): random
interleavings of records for the three store kinds (in and out of order, three keys),
``enforce_retention`` at random ``now`` through the control topic, clean restarts and restarts
on a wiped state directory, run by an instance process under exactly-once. The topology holds
a session count (clicks), a versioned table joined by a stream (rates, orders) and a key-value
table with a time to live forwarding its updates and deletes (profiles). Oracle: a reference
run of the same inputs and maintenance on the TopologyTestDriver, with no restart. The
read_committed outputs (as multisets of records) and the final stores must be equal: every
session, every rate's version as of each record time, every row of the TTL store (its stamps,
clock and cut-off rows included, so a dropped key that came back would show), and each
store's cut-off. Both sides read the stores from their state directories the same way.

Every record goes to partition 0 of its topic, so each task sees the order the test sends in:
before a command, a restart, or a record for the join task on the other of its two topics,
the test waits until what it sent is committed. Timestamps stay within the last day (the
session changelog keeps a day plus the retention).
"""

from __future__ import annotations

import collections
import shutil
import time
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from airflow_stateful_provider.streams.control.commands import new_command
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.state.keyvalue.ttl import key_stamp
from airflow_stateful_provider.streams.state.store_dir import open_store
from airflow_stateful_provider.streams.testing import TopologyTestDriver
from tests.integration.test_control_topic import STORE, Cluster, control_sessions, send_and_wait
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, produce, read_all
from tools.waits import wait_for_commits

pytestmark = pytest.mark.kafka

GAP = 300_000
HOUR = 3_600_000
KEYS = ("u1", "u2", "u3")
BASE = (int(time.time() * 1000) - 20 * HOUR) // 1000 * 1000
RATES, PROFILES = "rates-store", "profiles"
HISTORY = HOUR  # the versioned store's history retention
TTL = 2 * GAP
#: input topic -> (the app_configs entry naming it, the task reading it); output topics
INPUTS = {"click": ("input", 0), "rate": ("rates", 1), "order": ("orders", 1), "profile": ("profiles", 2)}
OUTPUTS = ("output", "joined", "profiles_out")
TASKS = 3
TOPOLOGY = "tests.integration.test_retention_model:retention_model"


def retention_model(config):
    """The session count of test_control_topic, plus orders joined against a versioned table of
    rates, plus a profiles table with a TTL whose changes (deletes too) go downstream."""
    builder = control_sessions(config)
    topics = config.app_configs
    rates = builder.table(topics["rates"], Consumed.with_("string", "string"),
                          Materialized.as_versioned(RATES, history_retention=HISTORY))
    (builder.stream(topics["orders"], Consumed.with_("string", "string"))
     .join(rates, lambda order, rate: f"{order}@{rate}").to(topics["joined"], Produced.with_("string", "string")))
    (builder.table(topics["profiles"], Consumed.with_("string", "string"),
                   Materialized.as_(PROFILES).with_time_to_live(TTL))
     .to_stream().to(topics["profiles_out"], Produced.with_("string", "string")))
    return builder


@st.composite
def scenarios(draw):
    """Records, quiet periods, maintenance runs and restarts (at most two). Every example has
    the issue's core, so that none of the small budget goes without: at a drawn step, a
    maintenance run then a restart on a wiped disk."""
    ops, clock, restarts = [], BASE, 1
    steps = draw(st.integers(4, 9))
    forced = draw(st.integers(1, steps - 1))
    for step in range(steps):
        if step == forced:
            ops += [("maintain", clock + draw(st.sampled_from([HOUR, 0, 6 * HOUR]))), ("restart", True)]
        kind = draw(st.sampled_from(["click", "click", "rate", "order", "profile", "profile", "maintain", "restart",
                                     "quiet"]))
        if kind == "quiet":
            clock += draw(st.sampled_from([GAP, 3 * HOUR]))
        elif kind == "maintain":
            ops.append(("maintain", clock + draw(st.sampled_from([-GAP, 0, GAP, HOUR, 6 * HOUR]))))
        elif kind == "restart":
            if restarts < 2:
                restarts += 1
                ops.append(("restart", draw(st.booleans())))
        else:
            clock += draw(st.integers(0, GAP))
            late = draw(st.sampled_from([0, 0, GAP // 2, 2 * GAP, 3 * HOUR]))
            value = None if kind == "profile" and draw(st.integers(0, 3)) == 0 else f"{kind}-{len(ops)}"
            ops.append((kind, draw(st.sampled_from(KEYS)), clock - late, value))
    return ops


#: The issue's case for each store kind, always run: old data, maintenance three hours later, a
#: wiped-disk restore, late records for what it dropped, fresh records.
ISSUE_CASE = [
    ("rate", "u1", BASE, "rate-a"), ("rate", "u1", BASE + GAP, "rate-b"), ("order", "u1", BASE + GAP + 1, "order-c"),
    ("profile", "u2", BASE, "profile-d"), ("click", "u3", BASE, "click-e"),
    ("maintain", BASE + 3 * HOUR), ("restart", True),
    ("order", "u1", BASE + 1, "order-f"), ("rate", "u1", BASE + 2, "rate-g"), ("click", "u3", BASE + 60_000, "click-h"),
    ("profile", "u2", BASE + 1_000, "profile-i"),
    ("profile", "u1", BASE + 3 * HOUR + 1, "profile-j"), ("click", "u1", BASE + 3 * HOUR + 1, "click-k"),
]


def probe_times(ops) -> list[int]:
    """The times the versioned store is read as of: each record's, and the millisecond after."""
    return sorted({t + d for op in ops if op[0] not in ("maintain", "restart") for t in (op[2],) for d in (0, 1)})


def final_stores(app_dir: Path, times: list[int]) -> dict:
    """The stores of the partition-0 tasks under ``app_dir`` as they are on disk."""
    with open_store(app_dir / "0_0" / STORE, read_only=True) as sessions:
        session_rows = sorted((s.key.decode(), s.start, s.end, int.from_bytes(v, "big", signed=True))
                              for s, v in sessions.all())
        session_cutoff = sessions.retention_cutoff
    with open_store(app_dir / "1_0" / RATES, read_only=True) as rates:
        def version(key, as_of=None):
            found = rates.get(key.encode(), as_of)
            return None if found is None else (found.value.decode(), found.timestamp, found.valid_to)
        as_of = {(k, t): version(k, t) for k in KEYS for t in times}
        latest = {k: version(k) for k in KEYS}
        rates_cutoff = rates.retention_cutoff
    with open_store(app_dir / "2_0" / PROFILES, read_only=True) as profiles:
        profile_rows = sorted(profiles.all())  # (key, stamp | value) and the TTL layer's reserved rows
    return {"sessions": session_rows, "session_cutoff": session_cutoff, "as_of": as_of, "latest": latest,
            "rates_cutoff": rates_cutoff, "profiles": profile_rows}


def check_the_rules(ops, stores) -> None:
    """The reference follows the rules, so an engine ignoring maintenance everywhere fails:
    every store carries the last cut-off, no session ends before its horizon, no row of the
    TTL store outlived its time to live at it."""
    cutoffs = [op[1] for op in ops if op[0] == "maintain"]
    if not cutoffs:
        return
    cutoff = max(cutoffs)
    assert stores["session_cutoff"] == stores["rates_cutoff"] == cutoff, stores
    assert all(end >= cutoff - GAP for _, _, end, _ in stores["sessions"]), stores
    assert all(key_stamp(raw) + TTL > cutoff for key, raw in stores["profiles"] if not key.startswith(b"\x00")), stores


def decoded(topic: str, key: bytes, value: bytes | None) -> tuple:
    if topic == "output":  # counts: int64
        return key.decode(), None if value is None else int.from_bytes(value, "big", signed=True)
    return key.decode(), None if value is None else value.decode()


def reference(ops, app_configs):
    """The TopologyTestDriver, no restart: (output records by topic, final stores)."""
    topology = retention_model(types.SimpleNamespace(app_configs=app_configs)).build()
    with TopologyTestDriver(topology, {"statestore_cache_max_bytes": 0}, store_type="rocksdb") as driver:
        inputs = {kind: driver.create_input_topic(app_configs[name], Serdes.string(), Serdes.string())
                  for kind, (name, _) in INPUTS.items()}
        outputs = {name: driver.create_output_topic(app_configs[name], Serdes.bytes(), Serdes.bytes())
                   for name in OUTPUTS}
        for op in ops:
            if op[0] == "maintain":
                driver.enforce_retention(op[1])
            elif op[0] != "restart":
                inputs[op[0]].pipe_input(op[1], op[3], op[2])
        records = {name: [(*decoded(name, r.key, r.value), r.timestamp) for r in topic.read_records_to_list()]
                   for name, topic in outputs.items()}
        stores = final_stores(Path(driver.config.state_dir) / driver.config.application_id, probe_times(ops))
    return records, stores


def run_on_the_broker(cluster: Cluster, ops):
    configs = cluster.config["app_configs"]
    pending: set[str] = set()  # the input topics with records sent since the last wait

    def wait_committed():
        topics = sorted(pending)
        ends = {i: end_offsets(cluster.bootstrap_servers, t)[0] for i, t in enumerate(topics)}
        wait_for_commits(lambda: {i: committed_offsets(cluster.bootstrap_servers, cluster.app, t).get(0, 0)
                                  for i, t in enumerate(topics)}, ends, "the records committed", context=cluster.logs)
        pending.clear()

    cluster.start("a")
    cluster.wait_running("a")
    for op in ops:
        if op[0] in INPUTS:
            topic = configs[INPUTS[op[0]][0]]
            join_topics = {configs["rates"], configs["orders"]}
            if topic in join_topics and pending & (join_topics - {topic}):
                wait_committed()  # the join task reads two topics: keep their order as sent
            produce(cluster.bootstrap_servers, topic, [(op[1], op[3], op[2])], partition=0)
            pending.add(topic)
            continue
        if pending:
            wait_committed()
        if op[0] == "maintain":
            outcome = send_and_wait(cluster, new_command(cluster.app, "enforce_retention", now_ms=op[1]),
                                    instances=("a",), timeout_ms=60_000)
            assert outcome.succeeded, (outcome, cluster.logs())
        else:
            assert cluster.instances["a"].stop() == 0, cluster.logs()
            if op[1]:
                shutil.rmtree(cluster.state_dir("a"), ignore_errors=True)
            cluster.start("a")
            cluster.wait_running("a")
    if pending:
        wait_committed()
    assert cluster.instances["a"].stop() == 0, cluster.logs()
    records = {name: [(*decoded(name, r.key, r.value), r.timestamp)
                      for r in read_all(cluster.bootstrap_servers, configs[name])] for name in OUTPUTS}
    return records, final_stores(cluster.state_dir("a") / cluster.app, probe_times(ops))


@settings(max_examples=2, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(ops=scenarios())
@example(ops=ISSUE_CASE)
def test_the_broker_run_with_restarts_equals_the_reference(bootstrap_servers, tmp_path_factory, ops):
    cluster = Cluster(bootstrap_servers, tmp_path_factory.mktemp("model"), "model", topology=TOPOLOGY,
                      subtopologies=TASKS, commit_interval_ms=200, processing_guarantee="exactly_once_v2")
    extra = {name: f"{cluster.app}-{name}" for name in ("rates", "orders", "profiles", "joined", "profiles_out")}
    create_topics(bootstrap_servers, dict.fromkeys(extra.values(), 2))
    cluster.config["app_configs"].update(extra)
    try:
        records, stores = run_on_the_broker(cluster, ops)
    finally:
        cluster.kill_all()
    expected_records, expected_stores = reference(ops, cluster.config["app_configs"])
    check_the_rules(ops, expected_stores)
    if ops is ISSUE_CASE:  # what the issue expects, spelled out
        assert [r[1] for r in expected_records["joined"]] == ["order-c@rate-b"], expected_records
        assert expected_records["profiles_out"] == [("u2", "profile-d", BASE), ("u2", None, BASE + TTL),
                                                    ("u1", "profile-j", BASE + 3 * HOUR + 1)], expected_records
        assert [s[0] for s in expected_stores["sessions"]] == ["u1"], expected_stores
        assert expected_stores["latest"]["u1"][0] == "rate-b" and expected_stores["as_of"][("u1", BASE + 1)] is None
    for name in OUTPUTS:
        assert collections.Counter(records[name]) == collections.Counter(expected_records[name]), (name, ops)
    assert stores == expected_stores, ops
