"""The sensors against the real broker: fake instances publish status documents with
StatusPublisher (a task restoring then running, a standby catching up), and DAGs run by
``dag.test()`` wait for them in poke and in deferrable mode (dag.test() runs the trigger
inline). The connection comes from ``AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT`` (JSON form)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from unittest import mock

import pytest
from kafka import KafkaAdminClient

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.sensors.restoration import RestorationSensor
from airflow_stateful_provider.sensors.standby_lag import StandbyLagSensor
from airflow_stateful_provider.streams.status.publisher import StatusPublisher, ensure_status_topic
from airflow_stateful_provider.triggers.status import RestorationTrigger
from tests.conftest import REPO_ROOT
from tools.kafka.topics import create_topics, produce
from tools.waits import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]

CHANGELOG_RECORDS = 100


class FakeApplication:
    """Two instances' documents, republished every 300 ms: i-1 owns task 0_0 (restoring, then
    running), i-2 holds its standby (lagging, then caught up)."""

    def __init__(self, bootstrap_servers: str, app: str) -> None:
        self.app = app
        self.changelog = f"{app}-counts-changelog"
        self.restored = False
        self.standby_position = 10
        self.publishers = [
            StatusPublisher(app, instance_id, lambda i=instance_id: self.document(i),
                            bootstrap_servers=bootstrap_servers, status_interval_ms=300)
            for instance_id in ("i-1", "i-2")]

    def document(self, instance_id: str) -> dict:
        if instance_id == "i-1":
            changelogs = [] if self.restored else [self.progress(40, CHANGELOG_RECORDS, 20.0)]
            tasks = [{"task_id": "0_0", "role": "active", "state": "running" if self.restored else "restoring",
                      "changelogs": changelogs}]
        else:
            tasks = [{"task_id": "0_0", "role": "standby", "state": "running",
                      "changelogs": [self.progress(self.standby_position, None, 5.0)]}]
        return {"format_version": 1, "instance_id": instance_id, "application_id": self.app, "state": "RUNNING",
                "epoch": 1, "host": f"host-{instance_id}", "pid": 4242, "process_id": f"uuid-{instance_id}",
                "generation": 2, "next_probing_rebalance_ms": None, "published_at": 0, "tasks": tasks,
                "acknowledgements": []}

    def progress(self, current: int, end: int | None, rate: float) -> dict:
        return {"topic": self.changelog, "partition": 0, "store": "counts", "start_offset": 0,
                "current_offset": current, "end_offset": end, "restore_rate": rate}

    def publish_now(self) -> None:
        for publisher in self.publishers:
            publisher.publish_now()


@pytest.fixture
def application(bootstrap_servers, monkeypatch):
    app = f"sensors-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        ensure_status_topic(admin, app)
    finally:
        admin.close()
    create_topics(bootstrap_servers, {f"{app}-counts-changelog": 1})
    produce(bootstrap_servers, f"{app}-counts-changelog", [(f"k{i}", b"1") for i in range(CHANGELOG_RECORDS)],
            partition=0)
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT",
                       json.dumps({"conn_type": "stateful_streams", "host": bootstrap_servers}))
    fake = FakeApplication(bootstrap_servers, app)
    for publisher in fake.publishers:
        publisher.start()
    hook = StatefulStreamsHook()

    def both_readable() -> bool:
        try:
            return len(hook.get_status(app, timeout=5).instances) == 2
        except Exception:  # noqa: BLE001 - not published yet
            return False

    wait_until(both_readable, 20, "the fake instances' documents readable before any sensor starts", interval=0.2)
    yield fake
    for publisher in fake.publishers:
        publisher.close()


def example_dag(dag_id: str):
    """A DAG of dags/wait_for_state.py, loaded as the DAG processor does; intervals shortened
    for the test (dag.test() runs these task objects; the serialized copy only schedules)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=REPO_ROOT / "dags" / "wait_for_state.py")
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag(dag_id)
    for task in dag.tasks:
        task.poke_interval, task.timeout = 0.5, 30
        task.stale_after_ms = 5_000
    dag.get_task("standbys_warm").max_lag_records = 5  # the fake changelog has 100 records
    return dag


class ChangesOnReads:
    """The fake application's changes, each made as a read of the sensors begins that follows
    a read of the state before it: a sensor that returned on the earlier read ended before the
    change. Waiting on the sensors' reads, not on a clock: under load dag.test() took longer to
    start its first sensor than fixed timers took to finish the restoration, and the sensors
    then never had anything to wait for (nor the triggers to run)."""

    def __init__(self, application: FakeApplication, changes) -> None:
        self.application, self.pending = application, list(changes)
        self.reads: list[tuple] = []
        self._read_since_change = False
        #: wall-clock time of each change made
        self.made: list[float] = []

    def before_read(self, args) -> None:
        self.reads.append(args)
        if self.pending and self._read_since_change:
            self.pending.pop(0)(self.application)
            self.application.publish_now()
            self.made.append(time.time())
        self._read_since_change = True


@pytest.mark.parametrize("dag_id", ["wait_for_state_in_worker", "wait_for_state"])
def test_dag_waits_for_restoration_and_standby_lag(airflow_db, application, dag_id):
    """The task restores, then its standby catches up, each once the sensors saw the state
    before: each sensor ends only after its condition came true. Deferred, the reads counted
    are the triggers' (a sensor's first check, in the worker, sees no change and defers)."""
    changes = ChangesOnReads(application, [lambda a: setattr(a, "restored", True),
                                           lambda a: setattr(a, "standby_position", CHANGELOG_RECORDS - 2)])
    deferred = dag_id == "wait_for_state"
    original_sync, original_async = StatefulStreamsHook.get_status, StatefulStreamsHook.aget_status
    other_mode_reads = []

    def counted(args, by_trigger: bool) -> None:
        if by_trigger == deferred:
            changes.before_read(args)
        else:
            other_mode_reads.append(args)

    def read(self, *args, **kwargs):
        counted(args, by_trigger=False)
        return original_sync(self, *args, **kwargs)

    async def aread(self, *args, **kwargs):
        counted(args, by_trigger=True)
        return await original_async(self, *args, **kwargs)

    dag = example_dag(dag_id)
    with mock.patch.object(StatefulStreamsHook, "get_status", read), \
            mock.patch.object(StatefulStreamsHook, "aget_status", aread):
        run = dag.test(run_conf={"application_id": application.app})
    instances = {ti.task_id: ti for ti in run.get_task_instances()}
    states = {task_id: ti.state for task_id, ti in instances.items()}
    assert run.state == "success", states
    assert states == {"state_restored": "success", "standbys_warm": "success"}
    assert len(changes.made) == 2, f"the sensors read the state {len(changes.reads)} time(s) only"
    assert {args[0] for args in changes.reads} == {application.app}
    restored_at, caught_up_at = changes.made
    assert instances["state_restored"].end_date.timestamp() >= restored_at, "returned before the task restored"
    assert instances["standbys_warm"].end_date.timestamp() >= caught_up_at, "returned before the standby caught up"
    if not deferred:
        assert not other_mode_reads, "a trigger ran for sensors that poke"


def test_poke_timeout_fails_with_the_stuck_task_table(application):
    sensor = RestorationSensor(task_id="restored", application_id=application.app, poll_interval=0.3, timeout=1.5)
    from airflow.sdk.exceptions import AirflowSensorTimeout

    with pytest.raises(AirflowSensorTimeout) as info:
        sensor.execute({})
    message = str(info.value)
    assert "0_0   restoring  i-1@host-i-1" in message
    assert "40/100 (40%)" in message and "60 offsets remaining (> 0), ETA 3s" in message


def test_trigger_timeout_event_against_the_broker(application):
    trigger = RestorationTrigger(application_id=application.app, poll_interval=0.3, deadline=time.time() + 1.5)

    async def first():
        return await anext(trigger.run())

    payload = asyncio.run(asyncio.wait_for(first(), timeout=20)).payload
    assert payload["status"] == "timeout"
    assert "60 offsets remaining" in payload["table"]
    assert payload["status_json"]["tasks"][0]["standbys"][0]["lag"] == CHANGELOG_RECORDS - 10


def test_unknown_application_keeps_waiting_then_names_the_reason(bootstrap_servers, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT",
                       json.dumps({"conn_type": "stateful_streams", "host": bootstrap_servers}))
    sensor = StandbyLagSensor(task_id="warm", application_id=f"never-{uuid.uuid4().hex[:6]}", max_lag_records=0,
                              poll_interval=0.3, timeout=1)
    from airflow.sdk.exceptions import AirflowSensorTimeout

    with pytest.raises(AirflowSensorTimeout, match="last status read failed: UnknownApplicationError"):
        sensor.execute({})


def test_hook_test_connection_against_the_broker(bootstrap_servers, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT",
                       json.dumps({"conn_type": "stateful_streams", "host": bootstrap_servers}))
    ok, message = StatefulStreamsHook().test_connection()
    assert ok, message
    assert "1 broker(s)" in message
