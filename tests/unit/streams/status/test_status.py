"""Status documents, the application snapshot and the on-call table (streams/status.py), and the
publisher's document building with fake instances and a fake producer (no broker)."""

from __future__ import annotations

import enum
import json
import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest

from airflow_stateful_provider.streams.errors import StatusFormatError, UnsupportedStatusVersionError
from airflow_stateful_provider.streams.status.application import ApplicationStatus, build_application_status
from airflow_stateful_provider.streams.status.collector import (
    RestoreRateTracker,
    status_document_from_instance,
)
from airflow_stateful_provider.streams.status.document import STATUS_FORMAT_VERSION, InstanceStatus
from airflow_stateful_provider.streams.status.document_parts import (
    ChangelogProgress,
    CommandAcknowledgement,
    InstanceTask,
)
from airflow_stateful_provider.streams.status.publisher import StatusPublisher
from airflow_stateful_provider.streams.status.rendering import progress_bar, render_status_table
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition
from tests.unit.streams.status.status_documents import fake_thread_metrics
from tools.waits import wait_until

NOW = 1_700_000_000_000
CL = "app-counts-changelog"


def changelog(partition: int, start: int, current: int, end: int | None, rate: float = 0.0) -> ChangelogProgress:
    return ChangelogProgress(CL, partition, "counts", start, current, end, rate)


def instance(instance_id: str, *tasks: InstanceTask, published_at: int = NOW - 1_000, host: str | None = None,
             acks: tuple = ()) -> InstanceStatus:
    return InstanceStatus(instance_id=instance_id, application_id="app", state="REBALANCING", epoch=1,
                          host=host or f"host-{instance_id}", pid=100, process_id=f"pid-{instance_id}",
                          published_at=published_at, generation=3, next_probing_rebalance_ms=NOW + 600_000,
                          tasks=tasks, acknowledgements=acks)


def document_dict() -> dict:
    return instance("i-1", InstanceTask("0_0", "active", "restoring", (changelog(0, 10, 60, 110, 25.0),)),
                    acks=(CommandAcknowledgement("c-1", "done", {"stores": ["counts"]}, NOW),)).to_dict()


# ---------------------------------------------------------------------------- document


def test_document_round_trips_through_dict_and_json():
    doc = InstanceStatus.from_dict(document_dict(), key="i-1")
    assert doc.tasks[0].changelogs[0] == changelog(0, 10, 60, 110, 25.0)
    assert doc.acknowledgements[0].result == {"stores": ["counts"]}
    assert InstanceStatus.from_dict(doc.to_dict(), key="i-1") == doc
    assert InstanceStatus.from_json_bytes(doc.to_json_bytes(), key="i-1") == doc
    # no task is state_lost: written as version 1, which readers of earlier builds still read
    assert json.loads(doc.to_json_bytes())["format_version"] == 1 == doc.format_version


def test_unknown_fields_are_ignored_and_nullable_fields_accept_null():
    data = document_dict() | {"added_later": 1, "generation": None, "next_probing_rebalance_ms": None}
    data["tasks"][0]["changelogs"][0]["end_offset"] = None
    doc = InstanceStatus.from_dict(data, key="i-1")
    assert doc.generation is None and doc.tasks[0].changelogs[0].end_offset is None


def test_newer_format_version_is_rejected_clearly():
    data = document_dict() | {"format_version": STATUS_FORMAT_VERSION + 1}
    with pytest.raises(UnsupportedStatusVersionError, match=r"instance 'i-1' has format_version 3.*upgrade"):
        InstanceStatus.from_dict(data, key="i-1")


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("epoch"), r"field 'epoch' is missing"),
    (lambda d: d.update(epoch=True), r"field 'epoch' must be an int >= 0, got True"),
    (lambda d: d.update(state="SLEEPING"), r"field 'state' must be one of .*'SLEEPING'"),
    (lambda d: d.update(format_version="1"), r"field 'format_version' must be an int >= 1"),
    (lambda d: d.update(tasks={}), r"field 'tasks' must be a list, got dict"),
    (lambda d: d["tasks"][0].update(role="leader"), r"field 'tasks\[0\].role' must be one of"),
    (lambda d: d["tasks"][0].update(task_id="0-1"), r"field 'tasks\[0\].task_id' task id must look like"),
    (lambda d: d["tasks"][0]["changelogs"][0].update(end_offset="110"),
     r"field 'tasks\[0\].changelogs\[0\].end_offset' must be an int >= 0 or null, got '110'"),
    (lambda d: d["tasks"][0]["changelogs"][0].update(restore_rate=float("nan")),
     r"field 'tasks\[0\].changelogs\[0\].restore_rate' must be a finite number >= 0"),
    (lambda d: d["tasks"][0]["changelogs"][0].pop("store"), r"field 'tasks\[0\].changelogs\[0\].store' is missing"),
    (lambda d: d["acknowledgements"][0].pop("result"), r"field 'acknowledgements\[0\].result' is missing"),
    (lambda d: d.update(instance_id="i-2"), r"field 'instance_id' is 'i-2' but the record key is 'i-1'"),
])
def test_malformed_documents_name_the_instance_and_the_field(mutate, message):
    data = document_dict()
    mutate(data)
    with pytest.raises(StatusFormatError, match=r"status document of instance 'i-1': " + message):
        InstanceStatus.from_dict(data, key="i-1")


def test_non_json_and_non_object_values_are_rejected_with_the_key():
    with pytest.raises(StatusFormatError, match=r"instance 'i-9' is not valid UTF-8 JSON"):
        InstanceStatus.from_json_bytes(b"{not json", key="i-9")
    with pytest.raises(StatusFormatError, match=r"instance 'i-9' must be a JSON object, got list"):
        InstanceStatus.from_json_bytes(b"[]", key="i-9")


# ---------------------------------------------------------------------------- snapshot


def snapshot(*docs: InstanceStatus, ends=None, stale_after=30_000, **kwargs) -> ApplicationStatus:
    return build_application_status(list(docs), ends or {}, NOW, stale_after, **kwargs)


def test_restoration_progress_and_eta_sum_over_partitions():
    doc = instance("i-1", InstanceTask("0_0", "active", "restoring", (
        changelog(0, 100, 400, 1_100, 50.0),          # 300 of 1000
        ChangelogProgress("app-other-changelog", 0, "other", 0, 100, 100, 0.0),  # done: 100 of 100
    )))
    task = snapshot(doc, ends={(CL, 0): 5_000}).task("0_0")
    assert task.state == "restoring" and task.active.instance_id == "i-1" and not task.active.stale
    r = task.restoration
    # Progress is measured against the captured end (1100), not the live end (5000): an active stops there.
    assert (r.restored, r.total, r.remaining, r.rate) == (400, 1_100, 700, 50.0)
    assert r.eta_seconds == pytest.approx(14.0)


def test_eta_is_unknown_without_rate_and_zero_when_done():
    unknown = snapshot(instance("i-1", InstanceTask("0_0", "active", "restoring", (changelog(0, 0, 10, 20),))))
    assert unknown.task("0_0").restoration.eta_seconds is None
    done = snapshot(instance("i-1", InstanceTask("0_0", "active", "restoring", (changelog(0, 0, 20, 20),))))
    assert done.task("0_0").restoration.eta_seconds == 0.0 and done.task("0_0").restoration.remaining == 0


def test_a_restoring_task_without_reported_ends_is_pending_never_none():
    # No changelog progress at all (an earlier writer), and a partition without its end.
    bare = snapshot(instance("i-1", InstanceTask("0_0", "active", "restoring"))).task("0_0")
    half = snapshot(instance("i-1", InstanceTask("0_0", "active", "restoring", (
        changelog(0, 0, 40, 100, 10.0), changelog(1, 5, 25, None, 5.0))))).task("0_0")
    for task in (bare, half):
        r = task.restoration
        assert task.state == "restoring" and r is not None and r.pending
        assert (r.total, r.remaining, r.eta_seconds, r.fraction) == (None, None, None, None)
    assert bare.restoration.restored == 0 and bare.restoration.changelogs == ()
    assert "no end offset for any changelog partition" in bare.notes[0]
    assert half.restoration.restored == 60 and half.restoration.rate == 15.0
    assert f"no end offset for {CL}-1" in half.notes[0]


def test_pending_restoration_renders_and_serializes():
    status = snapshot(instance("i-1", InstanceTask("0_0", "active", "restoring")))
    row = next(line for line in render_status_table(status).splitlines() if line.startswith("0_0"))
    assert "0/? (pending)" in row and "restoration pending" in row
    with_bars = render_status_table(status, bars=True)
    assert "[      pending       ] 0/? (pending)" in with_bars
    data = json.loads(json.dumps(status.to_json_dict()))["tasks"][0]["restoration"]
    assert data | {"changelogs": None} == {"pending": True, "restored": 0, "total": None, "remaining": None,
                                          "rate": 0.0, "eta_seconds": None, "changelogs": None}


def test_progress_bars_on_request():
    status = snapshot(instance("i-1", InstanceTask("0_0", "active", "restoring", (changelog(0, 0, 450, 1_000, 50.0),))))
    assert "[#########...........] 450/1,000 (45%)" in render_status_table(status, bars=True)
    assert "[" not in render_status_table(status)
    assert progress_bar(0.0) == "[....................]" and progress_bar(1.0) == "[####################]"
    assert progress_bar(1.7, width=4) == "[####]"


def test_running_active_has_no_restoration():
    task = snapshot(instance("i-1", InstanceTask("0_0", "active", "running"))).task("0_0")
    assert task.state == "running" and task.restoration is None and task.notes == ()


def test_standby_lag_is_measured_against_the_live_end_offset():
    active = instance("i-1", InstanceTask("0_1", "active", "running"))
    standby = instance("i-2", InstanceTask("0_1", "standby", "running", (
        changelog(1, 0, 900, 950),                    # reported end 950, live end 1000
        ChangelogProgress("app-other-changelog", 1, "other", 0, 40, 40),
    )))
    task = snapshot(active, standby, ends={(CL, 1): 1_000, ("app-other-changelog", 1): 45}).task("0_1")
    (replica,) = task.standbys
    assert (replica.instance_id, replica.warmup, replica.lag, replica.lag_basis) == ("i-2", False, 105, "live")


def test_standby_lag_falls_back_to_the_reported_end_and_says_so():
    standby = instance("i-2", InstanceTask("0_1", "standby", "running", (changelog(1, 0, 900, 950),)))
    task = snapshot(instance("i-1", InstanceTask("0_1", "active", "running")), standby).task("0_1")
    assert (task.standbys[0].lag, task.standbys[0].lag_basis) == (50, "reported")
    assert any("last reported end" in n for n in task.notes)


def test_standby_without_a_position_for_a_known_partition_has_unknown_lag():
    warm = instance("i-2", InstanceTask("0_1", "standby", "running", (changelog(1, 0, 900, 950),)))
    empty = instance("i-3", InstanceTask("0_1", "standby", "created"))
    task = snapshot(warm, empty, ends={(CL, 1): 1_000}).task("0_1")
    lags = {s.instance_id: (s.lag, s.lag_basis) for s in task.standbys}
    assert lags == {"i-2": (100, "live"), "i-3": (None, "unknown")}
    assert any("i-3 reports no position" in n for n in task.notes)


def test_warmups_are_flagged():
    doc = instance("i-2", InstanceTask("0_0", "warmup", "running", (changelog(0, 0, 10, 10),)))
    status = snapshot(instance("i-1", InstanceTask("0_0", "active", "running")), doc, ends={(CL, 0): 500})
    task = status.task("0_0")
    assert [(w.instance_id, w.lag) for w in task.warmups] == [("i-2", 490)]
    assert status.instance("i-2").warmup_tasks == ("0_0",) and status.instance("i-2").standby_tasks == ()


def test_stale_instance_is_flagged_and_its_tasks_are_shown_stale():
    old = instance("i-1", InstanceTask("0_0", "active", "running"), InstanceTask("0_1", "standby", "running"),
                   published_at=NOW - 95_000)
    fresh = instance("i-2", InstanceTask("0_1", "active", "running"))
    status = snapshot(old, fresh, stale_after=timedelta(seconds=30))
    assert [i.instance_id for i in status.stale_instances] == ["i-1"]
    assert status.instance("i-1").age_ms == 95_000
    t0 = status.task("0_0")
    assert t0.state == "stale" and t0.active.stale and "last published 1m35s ago" in t0.notes[0]
    t1 = status.task("0_1")
    assert t1.state == "running" and t1.standbys[0].stale


def test_fresh_active_claim_wins_over_a_stale_one():
    old = instance("i-1", InstanceTask("0_0", "active", "running"), published_at=NOW - 120_000)
    new = instance("i-2", InstanceTask("0_0", "active", "restoring", (changelog(0, 0, 5, 10, 1.0),)))
    task = snapshot(old, new).task("0_0")
    assert (task.active.instance_id, task.state) == ("i-2", "restoring")
    assert task.notes == ("also claimed active by i-1 (stale) (running)",)


def test_document_exactly_at_the_bound_is_not_stale():
    status = snapshot(instance("i-1", published_at=NOW - 30_000))
    assert not status.instance("i-1").stale


def test_unassigned_tasks_come_from_standby_only_claims_and_expected_tasks():
    doc = instance("i-2", InstanceTask("0_1", "standby", "running", (changelog(1, 0, 5, 5),)))
    status = snapshot(doc, expected_tasks=[TaskId(0, 0), "0_1", "1_0"])
    assert [t.task_id for t in status.tasks] == ["0_0", "0_1", "1_0"]
    assert [t.task_id for t in status.unassigned_tasks] == ["0_0", "0_1", "1_0"]
    assert status.task("0_1").active is None and status.task("0_1").standbys[0].instance_id == "i-2"


def test_snapshot_input_errors():
    with pytest.raises(ValueError, match="no documents and no application_id"):
        build_application_status([], {}, NOW, 1_000)
    other = InstanceStatus.from_dict(instance("i-9").to_dict() | {"application_id": "other"})
    with pytest.raises(ValueError, match=r"\['app', 'other'\]"):
        build_application_status([instance("i-1"), other], {}, NOW, 1_000)
    with pytest.raises(ValueError, match="stale_after_ms must be an int of milliseconds >= 0 or a timedelta, got -1"):
        build_application_status([instance("i-1")], {}, NOW, -1)
    assert build_application_status([], {}, NOW, 1_000, application_id="app").tasks == ()


def cluster() -> ApplicationStatus:
    a = instance("i-1", InstanceTask("0_0", "active", "restoring", (changelog(0, 0, 4_000, 10_000, 1_200.0),)),
                 InstanceTask("0_1", "standby", "running", (changelog(1, 0, 300, 300),)), host="worker-1")
    b = instance("i-2", InstanceTask("0_1", "active", "running"),
                 InstanceTask("0_0", "warmup", "running", (changelog(0, 0, 9_000, 9_500),)), host="worker-2")
    c = instance("i-3", InstanceTask("0_2", "active", "running"), host="worker-3", published_at=NOW - 95_000)
    return snapshot(a, b, c, ends={(CL, 0): 10_000, (CL, 1): 320}, expected_tasks=["0_3"])


def test_table_has_a_row_per_task_and_flags_stale_instances():
    table = render_status_table(cluster())
    lines = table.splitlines()
    assert lines[0] == ("application app: 3 instance(s) (1 stale), 4 task(s) (1 restoring, 1 unassigned); "
                        "stale after 30s")
    assert lines[1].split() == ["TASK", "ACTIVE", "STATE", "RESTORED/TOTAL", "RATE", "ETA", "STANDBYS", "(LAG)",
                                "NOTES"]
    row = {line.split()[0]: line for line in lines[2:6]}
    assert row["0_0"].split()[:7] == ["0_0", "i-1@worker-1", "restoring", "4,000/10,000", "(40%)", "1,200/s", "5s"]
    assert "warmup i-2@worker-2 (1,000)" in row["0_0"]
    assert row["0_1"].split()[:3] == ["0_1", "i-2@worker-2", "running"] and "i-1@worker-1 (20)" in row["0_1"]
    assert row["0_2"].split()[:3] == ["0_2", "i-3@worker-3", "stale"] and "last published 1m35s ago" in row["0_2"]
    assert row["0_3"].split()[:3] == ["0_3", "-", "unassigned"] and "no instance runs this task" in row["0_3"]
    # columns are fixed-width: every task row starts its STATE column at the same position
    assert len({line.index(s) for line, s in [(row["0_0"], "restoring"), (row["0_1"], "running")]}) == 1
    assert "STALE INSTANCES" in table
    assert "  i-3@worker-3 pid 100 epoch 1 state REBALANCING, last published 1m35s ago" in lines


def test_json_dict_is_plain_json():
    data = json.loads(json.dumps(cluster().to_json_dict()))
    assert data["stale_instances"] == ["i-3"] and data["unassigned_tasks"] == ["0_3"]
    task = next(t for t in data["tasks"] if t["task_id"] == "0_0")
    assert task["restoration"] == {"pending": False, "restored": 4_000, "total": 10_000, "remaining": 6_000,
                                   "rate": 1_200.0, "eta_seconds": 5.0, "changelogs": [
                                       {"topic": CL, "partition": 0, "store": "counts", "start_offset": 0,
                                        "current_offset": 4_000, "end_offset": 10_000, "restore_rate": 1_200.0}]}
    assert task["standbys"][0] | {} == {"instance_id": "i-2", "host": "worker-2", "warmup": True, "state": "running",
                                       "lag": 1_000, "lag_basis": "live", "stale": False, "update_rate": 0.0}


# ---------------------------------------------------------------------------- building documents


class State(enum.Enum):
    CREATED = "CREATED"
    RESTORING = "RESTORING"
    RUNNING = "RUNNING"
    CLOSED = "CLOSED"
    REBALANCING = "REBALANCING"


def fake_task(task_id, state):
    """A StreamTask as status/instance_view.py's ActiveTaskView describes it."""
    return SimpleNamespace(id=task_id, state=state, metrics=SimpleNamespace(dropped_records={}, process_total=0),
                           partitions=[])


def fake_instance(standby_tasks=None, progress=()):
    """A KafkaStreams with one thread, as status/instance_view.py's InstanceView describes it."""
    progress = [
        SimpleNamespace(partition=TopicPartition(CL, 0), task_id=TaskId(0, 0), store_name="counts", start_offset=5,
                        end_offset=105, position=55, restored=50, completed=False),
        SimpleNamespace(partition=TopicPartition(CL, 2), task_id=TaskId(0, 2), store_name="counts", start_offset=0,
                        end_offset=30, position=10, restored=10, completed=False),
        *progress,
    ]
    thread = SimpleNamespace(
        tasks={TaskId(0, 0): fake_task(TaskId(0, 0), State.RESTORING),
               TaskId(0, 1): fake_task(TaskId(0, 1), State.RUNNING),
               TaskId(0, 3): fake_task(TaskId(0, 3), State.CLOSED)},
        changelog_reader=SimpleNamespace(progress=lambda: list(progress), restore_sources={}, lost_tasks={}),
        consumer=SimpleNamespace(group_metadata=lambda: SimpleNamespace(generation_id=7)),
        standby_tasks=standby_tasks or {}, tasks_lock=threading.RLock(), next_probing_rebalance_ms=None,
        name="app-StreamThread-1", metrics=fake_thread_metrics(), snapshot_taker=None,
        kafka_waits=SimpleNamespace(current=None))
    streams = SimpleNamespace(state=State.REBALANCING, threads=[thread], process_id="uuid-1", metrics_endpoint=None,
                              config=SimpleNamespace(application_id="app", processing_guarantee="at_least_once",
                                                     host_application=None))
    return streams, progress


def test_document_from_an_instance_reads_its_tasks_and_restoration():
    streams, _ = fake_instance()
    doc = status_document_from_instance(streams, "i-1", 4, now_ms=NOW, host="h", pid=9)
    parsed = InstanceStatus.from_dict(doc, key="i-1")
    assert (parsed.state, parsed.epoch, parsed.generation, parsed.process_id, parsed.host, parsed.pid) == \
        ("REBALANCING", 4, 7, "uuid-1", "h", 9)
    assert [(t.task_id, t.role, t.state) for t in parsed.tasks] == [("0_0", "active", "restoring"),
                                                                   ("0_1", "active", "running")]
    assert parsed.tasks[0].changelogs == (ChangelogProgress(CL, 0, "counts", 5, 55, 105, 0.0),)
    assert parsed.tasks[1].changelogs == ()


def test_document_is_copied_under_each_threads_tasks_lock():
    # The stream thread changes its tasks under tasks_lock; a document built meanwhile waits
    # for it and then shows the finished change, never the half-done one.
    streams, _ = fake_instance()
    thread = streams.threads[0]
    thread.tasks_lock = threading.RLock()
    documents = []
    with thread.tasks_lock:
        builder = threading.Thread(target=lambda: documents.append(
            status_document_from_instance(streams, "i-1", 1, now_ms=NOW, host="h", pid=1)))
        builder.start()
        builder.join(0.2)
        assert builder.is_alive() and not documents  # waiting for the lock
        thread.tasks[TaskId(0, 0)].state = State.RUNNING  # the change the lock guards
    builder.join(5)
    assert [(t["task_id"], t["state"]) for t in documents[0]["tasks"]] == [("0_0", "running"), ("0_1", "running")]


def test_document_from_an_instance_includes_standbys_and_warmups_when_present():
    standby = SimpleNamespace(id=TaskId(0, 2), state=State.RUNNING, warmup=False)
    warm = SimpleNamespace(id=TaskId(0, 4), state=State.RUNNING, warmup=True)
    warm_progress = SimpleNamespace(partition=TopicPartition(CL, 4), task_id=TaskId(0, 4), store_name="counts",
                                    start_offset=0, end_offset=None, position=3)
    streams, _ = fake_instance({TaskId(0, 2): standby, TaskId(0, 4): warm}, progress=[warm_progress])
    parsed = InstanceStatus.from_dict(status_document_from_instance(streams, "i-1", 1, now_ms=NOW), key="i-1")
    roles = {t.task_id: (t.role, t.changelogs) for t in parsed.tasks}
    assert roles["0_2"] == ("standby", (ChangelogProgress(CL, 2, "counts", 0, 10, 30, 0.0),))
    assert roles["0_4"] == ("warmup", (ChangelogProgress(CL, 4, "counts", 0, 3, None, 0.0),))


def test_restore_rate_comes_from_the_tracker_window():
    streams, progress = fake_instance()
    tracker = RestoreRateTracker(window_ms=10_000)
    status_document_from_instance(streams, "i-1", 1, now_ms=NOW, rate_tracker=tracker)
    progress[0].position = 255  # +200 offsets in 2 s
    doc = status_document_from_instance(streams, "i-1", 1, now_ms=NOW + 2_000, rate_tracker=tracker)
    assert doc["tasks"][0]["changelogs"][0]["restore_rate"] == pytest.approx(100.0)


def test_rate_tracker_slides_its_window_and_restarts_on_a_wipe():
    tracker = RestoreRateTracker(window_ms=10_000)
    assert tracker.observe("p", 0, 0) == 0.0
    assert tracker.observe("p", 1_000, 5_000) == pytest.approx(200.0)
    # the oldest sample kept is the newest one at or before the window start (here 5 s):
    assert tracker.observe("p", 1_100, 20_000) == pytest.approx(100 / 15)
    assert tracker.observe("p", 1_400, 21_000) == pytest.approx(400 / 16)
    assert tracker.observe("p", 2_400, 30_000) == pytest.approx(1_300 / 10)  # now anchored at 20 s
    assert tracker.observe("p", 50, 22_000) == 0.0                          # position went back: store wiped
    tracker.retain([])
    assert tracker.observe("p", 60, 23_000) == 0.0


# ---------------------------------------------------------------------------- publisher (fake producer)


class FakeFuture:
    def add_errback(self, callback):
        return self


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None]] = []
        self.closed = False

    def send(self, topic, key=None, value=None):
        self.sent.append((topic, key, value))
        return FakeFuture()

    def flush(self, timeout=None):
        pass

    def close(self, timeout=None):
        self.closed = True


def publisher(producer, collect=None, **kwargs):
    document = instance("i-1", InstanceTask("0_0", "active", "running")).to_dict()
    clock = iter(range(NOW, NOW + 10**6, 1_000))
    return StatusPublisher("app", "i-1", collect or (lambda: document), producer=producer,
                           clock=lambda: next(clock), **kwargs)


def test_publish_stamps_and_validates_the_document_and_clean_close_sends_a_tombstone():
    producer = FakeProducer()
    pub = publisher(producer)
    status = pub.publish()
    assert status.published_at == NOW
    topic, key, value = producer.sent[0]
    assert (topic, key) == ("app-status", b"i-1")
    assert InstanceStatus.from_json_bytes(value, key="i-1") == status
    pub.close(clean=True)
    assert producer.sent[-1] == ("app-status", b"i-1", None)
    assert not producer.closed  # a producer given to the publisher is the caller's to close
    with pytest.raises(RuntimeError, match="closed"):
        pub.publish()


def test_dirty_close_publishes_a_last_document():
    producer = FakeProducer()
    publisher(producer).close(clean=False)
    assert len(producer.sent) == 1 and producer.sent[0][2] is not None


def test_invalid_document_is_refused_before_sending():
    producer = FakeProducer()
    pub = publisher(producer, collect=lambda: {"format_version": 1, "instance_id": "i-1"})
    with pytest.raises(StatusFormatError, match=r"instance 'i-1': field '\w+' is missing"):
        pub.publish()
    assert producer.sent == []


def test_acknowledgements_are_repeated_in_documents():
    producer = FakeProducer()
    pub = publisher(producer)
    pub.acknowledge("cmd-1", "done", {"compacted": 3}, publish=False)
    status = pub.publish()
    assert [(a.command_id, a.status, a.result) for a in status.acknowledgements] == [("cmd-1", "done",
                                                                                    {"compacted": 3})]


def test_publish_now_wakes_the_thread_without_blocking_and_the_interval_repeats():
    producer = FakeProducer()
    collected = threading.Event()
    document = instance("i-1").to_dict()

    def collect():
        collected.set()
        return document

    pub = publisher(producer, collect=collect, status_interval_ms=60_000).start()
    try:
        wait_until(lambda: len(producer.sent) >= 1, 5, "the first document", interval=0.01)
        assert len(producer.sent) == 1  # published once at start, next one due in 60 s
        pub.publish_now()
        wait_until(lambda: len(producer.sent) >= 2, 5, "the document publish_now asked for", interval=0.01)
        assert len(producer.sent) == 2
    finally:
        pub.close()
    fast = publisher(FakeProducer(), status_interval_ms=20).start()
    time.sleep(0.3)
    fast.close()
    assert fast.published_count >= 3


def test_skipped_records_travel_in_the_document_and_show_in_the_task_status():
    streams, _ = fake_instance()
    running = streams.threads[0].tasks[TaskId(0, 1)]
    running.metrics = SimpleNamespace(dropped_records={"invalid-timestamp": 2, "production": 1}, process_total=9)
    doc = InstanceStatus.from_dict(status_document_from_instance(streams, "i-1", 4, now_ms=NOW), key="i-1")
    assert doc.tasks[1].dropped_records == {"invalid-timestamp": 2, "production": 1}
    assert doc.tasks[0].dropped_records == {} and "dropped_records" not in doc.tasks[0].to_dict()
    assert InstanceStatus.from_json_bytes(doc.to_json_bytes(), key="i-1") == doc
    assert doc.format_version == 1  # an optional field: readers of version 1 ignore it

    status = build_application_status([doc], {}, NOW)
    (task,) = [t for t in status.tasks if t.task_id == "0_1"]
    assert task.dropped_records == {"invalid-timestamp": 2, "production": 1}
    assert "3 record(s) skipped: invalid-timestamp 2, production 1" in task.notes

    bad = doc.to_dict()
    bad["tasks"][1]["dropped_records"] = {"production": "many"}
    with pytest.raises(StatusFormatError, match=r"tasks\[1\].dropped_records.production"):
        InstanceStatus.from_dict(bad, key="i-1")
