"""Issue 34 on the real broker, exactly-once: two instances ("a", "b", one standby each)
count clicks per session (gap 5 minutes, no grace) from a partition set whose older users
went quiet three days ago. ``StoreRetentionOperator`` online at now drops those sessions and
writes a tombstone for each and the cut-off marker into each changelog partition (actives
only). Then:

- a late click (three days old, one minute after a dropped session) is dropped as expired:
  no output for its user, on the maintained instances;
- the stalled task moves to its standby (the instance where it is active stops): another
  late click, sent to the moved task, is dropped there too;
- after a clean stop, the two copies of every task (the moved task's: the stopped active's and
  the promoted standby's) hold the same sessions, observed stream time and cut-off;
- a third instance "c" on an empty state directory restores both tasks from the changelogs
  and holds the same stores; another late click is dropped there too, while a click after the
  cut-off is counted.
"""

from __future__ import annotations

import json
import os
import struct
import time

import pytest

from airflow_stateful_provider.operators.maintenance import StoreRetentionOperator
from airflow_stateful_provider.streams.state.common.cutoff import SESSION_CUTOFF_KEY
from airflow_stateful_provider.streams.state.store_dir import open_store
from tests.integration.test_control_topic import PARTITIONS, STORE, Cluster, click_records, final_sessions
from tools.kafka.topics import committed_offsets, end_offsets, produce, read_all
from tools.waits import wait_for_commits

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]

DAY = 86_400_000
QUIET = [f"user-{u:02d}" for u in range(4)]  # quiet for three days
ACTIVE = [f"user-{u:02d}" for u in range(4, 8)]  # clicking two minutes ago


def wait_committed(cluster: Cluster) -> None:
    ends = end_offsets(cluster.bootstrap_servers, cluster.input)
    wait_for_commits(lambda: committed_offsets(cluster.bootstrap_servers, cluster.app, cluster.input), ends,
                     "every click committed", context=cluster.logs)


def stores_of(cluster: Cluster, name: str) -> dict[str, tuple]:
    """Task id -> (sessions, observed stream time, cut-off) of the session store copies in the
    state directory of the stopped instance ``name``."""
    found = {}
    for path in sorted((cluster.state_dir(name) / cluster.app).glob(f"*/{STORE}")):
        store = open_store(path, read_only=True)
        try:
            sessions = sorted((s.key, s.start, s.end, v) for s, v in store.all())
            found[path.parent.name] = (sessions, store.observed_stream_time, store.retention_cutoff)
        finally:
            store.close()
    return found


@pytest.fixture
def cluster(bootstrap_servers, tmp_path):
    previous = os.environ.get("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT")
    os.environ["AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT"] = json.dumps(
        {"conn_type": "stateful_streams", "host": bootstrap_servers})
    cluster = Cluster(bootstrap_servers, tmp_path, "cutoff", commit_interval_ms=500, num_standby_replicas=1,
                      processing_guarantee="exactly_once_v2")
    # The clicks are three days old, and a session changelog's time retention (store retention +
    # one day) is judged by the broker against the wall clock: its next retention check would
    # delete them from the changelog (the active segment too), and a warmup restoring after that
    # would hold nothing to drop. Users who keep stalled partitions keep their changelog longer.
    cluster.config["app_configs"]["changelog_configs"] = {"retention.ms": str(7 * DAY)}
    try:
        yield cluster
    finally:
        cluster.kill_all()
        if previous is None:
            os.environ.pop("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT", None)
        else:
            os.environ["AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT"] = previous


def test_the_cut_off_reaches_standbys_and_restored_instances_and_late_clicks_are_dropped_everywhere(cluster):
    now = int(time.time() * 1000)
    old = now - 3 * DAY
    # the quiet users on partition 0 (stalled three days), the active ones on partition 1
    produce(cluster.bootstrap_servers, cluster.input,
            click_records([(user, old + i * 10_000) for user in QUIET for i in range(2)]), partition=0)
    produce(cluster.bootstrap_servers, cluster.input,
            click_records([(user, now - 120_000 + i * 10_000) for user in ACTIVE for i in range(2)]), partition=1)
    cluster.start("a", "b")
    cluster.wait_running("a", "b")
    wait_committed(cluster)
    before = final_sessions(cluster.bootstrap_servers, cluster.output)
    assert {(u, old, old + 10_000) for u in QUIET} <= set(before), before

    operator = StoreRetentionOperator(task_id="retention", application_id=cluster.app, now=now)
    operator.timeout_ms = 60_000
    rows = operator.execute({})
    actives = [r for r in rows if r["role"] == "active"]
    assert sorted(r["task_id"] for r in actives) == [f"0_{p}" for p in range(PARTITIONS)], rows
    # the stalled task's active: a tombstone per dropped session (one per quiet user), then the marker
    written = {r["task_id"]: r["result"]["changelog_records_written"] for r in actives}
    assert written == {"0_0": len(QUIET) + 1, "0_1": 1}, rows
    assert all(r["result"]["cutoff_ms"] == now for r in actives), rows
    assert all(r["result"]["changelog_records_written"] == 0 for r in rows if r["role"] != "active"), rows
    dropped = {r["task_id"]: bool(r["result"]["segments_dropped"]) for r in actives}
    assert dropped == {"0_0": True, "0_1": False}, rows  # only the stalled partition had expired data

    changelog = read_all(cluster.bootstrap_servers, f"{cluster.app}-{STORE}-changelog")  # read_committed
    markers = {r.partition for r in changelog if r.key == SESSION_CUTOFF_KEY}
    assert markers == set(range(PARTITIONS)), markers
    window = struct.pack(">qq", old + 10_000, old)  # key | end | start of each dropped session
    tombstones = sorted(r.key[:-16].decode() for r in changelog
                        if r.partition == 0 and r.value is None and r.key.endswith(window))
    assert tombstones == QUIET, tombstones  # (the other tombstones on partition 0 are session merges)

    # a late click for a dropped session, on the maintained instances
    produce(cluster.bootstrap_servers, cluster.input, click_records([(QUIET[0], old + 60_000)]), partition=0)
    wait_committed(cluster)

    # the stalled task moves to its standby: stop the instance where it is active
    docs = cluster.documents()
    (moved_from,) = [n for n in ("a", "b") if any(t.task_id == "0_0" and t.role == "active" for t in docs[n].tasks)]
    moved_to = "b" if moved_from == "a" else "a"
    assert any(t.task_id == "0_0" and t.role == "standby" for t in docs[moved_to].tasks), docs
    assert cluster.instances[moved_from].stop() == 0, cluster.logs()
    cluster.wait_running(moved_to)  # active for both tasks now
    produce(cluster.bootstrap_servers, cluster.input, click_records([(QUIET[2], old + 60_000)]), partition=0)
    wait_committed(cluster)
    cluster.stop_all()
    after = final_sessions(cluster.bootstrap_servers, cluster.output)
    assert after == before, set(after.items()) ^ set(before.items())

    a, b = stores_of(cluster, "a"), stores_of(cluster, "b")
    assert sorted(a) == sorted(b) == [f"0_{p}" for p in range(PARTITIONS)]  # active + standby each
    assert a == b
    live = sorted(s for sessions, _, _ in a.values() for s in sessions)
    assert [(u.decode(), e - s) for u, s, e, _ in live] == [(u, 10_000) for u in ACTIVE], live
    assert a["0_0"][0] == []
    assert all(cutoff == now and observed >= now for _, observed, cutoff in a.values()), a
    assert stores_of(cluster, moved_to)["0_0"][0::2] == ([], now)  # the moved-to store, after its late click

    # a new instance on an empty disk restores both tasks from the changelogs
    cluster.start("c")
    cluster.wait_running("c")
    produce(cluster.bootstrap_servers, cluster.input, click_records([(QUIET[1], old + 60_000)]), partition=0)
    produce(cluster.bootstrap_servers, cluster.input, click_records([(ACTIVE[0], now + 1_000)]), partition=1)
    wait_committed(cluster)
    cluster.instances["c"].stop()
    final = final_sessions(cluster.bootstrap_servers, cluster.output)
    assert not [w for w in final if w[0] == QUIET[1] and w not in before], final
    grown = [(w, c) for w, c in final.items() if w[0] == ACTIVE[0] and w not in before]
    assert [c for _, c in grown] == [3], grown  # the click after the cut-off merged and counted
    c = stores_of(cluster, "c")
    assert sorted(c) == sorted(a)
    for task, (sessions, _, cutoff) in c.items():
        assert cutoff == now, (task, c[task])
        mine = [s for s in sessions if s[0] != ACTIVE[0].encode()]
        theirs = [s for s in a[task][0] if s[0] != ACTIVE[0].encode()]
        assert mine == theirs, task
    assert c["0_0"] == a["0_0"]  # the stalled task: nothing came back, the same clock
