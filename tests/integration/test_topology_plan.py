"""Redeploying a changed topology against a real broker: an application started in this
process records its topology in ``<application_id>-topology``; ``stateful-streams plan``
compares versions of it with that record (kept, new, dropped, incompatible, an input topic
that gained partitions, nothing recorded); SubmitTopologyOperator, run by ``dag.test()``
(dags/redeploy_topology.py), fails on an incompatible change before anything is submitted,
and with ``on_incompatible="reset"`` resets the application before it launches spark-submit.
No Spark runs: the refusal comes before the launch, and the launch after the reset fails at
once (the Spark connection names ``spark3-submit``, not installed here).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions

from airflow_stateful_provider import cli
from airflow_stateful_provider.streams import KafkaStreams, NoRecordedTopologyError, StreamsConfig
from airflow_stateful_provider.streams.redeploy.topology_topic import read_recorded_topology
from tests.conftest import REPO_ROOT
from tests.integration.redeploy_topologies import counts_and_visits, topic_names
from tests.integration.test_cli_errors import clean_environment
from tools.kafka.topics import create_topics

pytestmark = pytest.mark.kafka

COMMAND = str(Path(sys.executable).parent / "stateful-streams")
VERSIONS = "tests.integration.redeploy_topologies"


class Recorded:
    """Application ``redeploy-<suffix>`` started once with counts_and_visits (which records it)."""

    def __init__(self, servers: str, tmp_path: Path) -> None:
        self.servers, self.app = servers, f"redeploy-{uuid.uuid4().hex[:8]}"
        self.source, self.sink = topic_names(self.app)
        create_topics(servers, {self.source: 2, self.sink: 1})
        self.config = StreamsConfig(application_id=self.app, bootstrap_servers=servers,
                                    state_dir=str(tmp_path / "state"), status_interval_ms=300)
        self.streams = KafkaStreams(counts_and_visits(self.config), self.config)
        self.streams.start()  # the record is written before start() returns

    def stop(self) -> None:
        self.streams.close(timeout=60)

    def plan(self, version: str, *options: str) -> tuple[int, str]:
        out = io.StringIO()
        code = cli.main(["plan", self.app, "--topology", f"{VERSIONS}:{version}", "--bootstrap-servers",
                         self.servers, *options], out=out)
        return code, out.getvalue()

    def topics(self) -> set[str]:
        admin = KafkaAdminClient(bootstrap_servers=self.servers)
        try:
            return {t for t in admin.list_topics() if t.startswith(f"{self.app}-")}
        finally:
            admin.close()


@pytest.fixture
def recorded(bootstrap_servers, tmp_path):
    application = Recorded(bootstrap_servers, tmp_path)
    try:
        yield application
    finally:
        application.stop()


def test_plan_of_each_change_against_a_running_application(recorded, capsys):
    app = recorded.app
    admin = KafkaAdminClient(bootstrap_servers=recorded.servers)
    try:
        topic = f"{app}-topology"
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
        assert configs["cleanup.policy"]["value"] == "compact"
    finally:
        admin.close()

    code, text = recorded.plan("counts_and_visits")
    assert code == 0, text
    assert text.startswith(f"topology plan for application '{app}': compatible\n")
    assert f"stores kept (2):\n  counts: key_value (RocksDB), serdes string/int64, 2 partition(s), " \
           f"{app}-counts-changelog\n  visits: session" in text

    code, text = recorded.plan("counts_and_refunds", "--json")
    assert code == 0, text
    plan = json.loads(text)
    assert plan["compatible"] is True
    assert {verdict: [s["name"] for s in stores] for verdict, stores in plan["stores"].items()} == {
        "kept": ["counts"], "new": ["refunds"], "dropped": ["visits"], "incompatible": []}
    assert plan["orphaned_topics"] == [f"{app}-visits-changelog"]

    incompatible = subprocess.run(
        [COMMAND, "plan", app, "--topology", f"{VERSIONS}:counts_as_strings", "--bootstrap-servers",
         recorded.servers], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        env={**clean_environment(), "PYTHONPATH": str(REPO_ROOT)})
    assert incompatible.returncode == 4, incompatible
    assert incompatible.stdout.startswith(f"topology plan for application '{app}': INCOMPATIBLE\n")
    assert "stores changed incompatibly (1):\n  counts: key_value (RocksDB), serdes string/string" in \
        incompatible.stdout
    assert "    CANNOT FOLLOW: value_serde int64 -> string: the stored data was written with int64" in \
        incompatible.stdout

    admin = KafkaAdminClient(bootstrap_servers=recorded.servers)
    try:
        admin.create_partitions({recorded.source: NewPartitions(total_count=3)})
    finally:
        admin.close()
    code, text = recorded.plan("counts_and_visits", "--json")
    assert code == 4, text
    plan = json.loads(text)
    assert [(s["name"], [(c["what"], c["recorded"], c["new"]) for c in s["changes"]])
            for s in plan["stores"]["incompatible"]] == [("counts", [("partitions", 2, 3)]),
                                                          ("visits", [("partitions", 2, 3)])]

    capsys.readouterr()
    out = io.StringIO()
    code = cli.main(["plan", f"{app}-typo", "--topology", f"{VERSIONS}:counts_and_visits", "--bootstrap-servers",
                     recorded.servers], out=out)
    assert (code, out.getvalue()) == (1, "")
    assert capsys.readouterr().err == (
        f"error: no topology recorded for application '{app}-typo' (no topic '{app}-typo-topology' on "
        f"{recorded.servers}): it never started with a provider that records its topology, it was reset, or these "
        f"are another cluster's brokers; nothing to compare with (a first deploy needs no plan)\n")


def redeploy_dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=REPO_ROOT / "dags" / "redeploy_topology.py")
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag("redeploy_topology")


def topology_plan_xcom(run):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        [row] = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, key="topology_plan")).all()
        return XComModel.deserialize_value(row)


def test_submit_fails_on_an_incompatible_change_and_resets_when_told(recorded, airflow_db, monkeypatch):
    app = recorded.app
    recorded.stop()
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT",
                       json.dumps({"conn_type": "stateful_streams", "host": recorded.servers}))
    # spark3-submit (a binary the Spark provider may call) is not installed here: a submission
    # fails at its launch, right after the plan (and the reset), without starting Spark.
    assert shutil.which("spark3-submit") is None
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]",
                                                                  "extra": {"spark-binary": "spark3-submit"}}))
    internal = recorded.topics()
    state = Path(recorded.config.state_dir) / app
    assert state.is_dir()
    assert {f"{app}-topology", f"{app}-counts-changelog", f"{app}-visits-changelog"} <= internal
    driver_logs = Path(tempfile.gettempdir(), "stateful-streams")
    conf = {"application_id": app, "topology": f"{VERSIONS}:counts_as_strings", "instances": 1,
            "streams_config": {"state_dir": recorded.config.state_dir}}

    failed = redeploy_dag().test(run_conf={**conf, "on_incompatible": "fail"})
    assert failed.state == "failed"
    plan = topology_plan_xcom(failed)
    assert plan["compatible"] is False
    assert [(s["name"], [c["what"] for c in s["changes"]]) for s in plan["stores"]["incompatible"]] == [
        ("counts", ["value_serde"])]
    # nothing was submitted or changed: no launch (its log), every topic and the state still there
    assert list(driver_logs.glob(f"{app}-*.log")) == []
    assert recorded.topics() == internal and state.is_dir()
    assert read_recorded_topology(recorded.servers, app).store("counts").value_serde == "int64"

    reset = redeploy_dag().test(run_conf={**conf, "on_incompatible": "reset"})
    assert reset.state == "failed"  # at the launch of spark3-submit, after the reset
    assert topology_plan_xcom(reset) == plan
    assert recorded.topics() == set() and not state.exists()
    with pytest.raises(NoRecordedTopologyError):
        read_recorded_topology(recorded.servers, app)
    assert len(list(driver_logs.glob(f"{app}-*.log"))) == 1  # the launch was tried once the reset was done
