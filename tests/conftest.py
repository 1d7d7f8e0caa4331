"""Test harness shared by unit and integration tests.

- ``kafka_broker``: one real single-node KRaft broker per test session (tools/kafka/broker.py);
  tests using it are marked ``kafka``.
- ``kafka_cluster``: a real 3-node KRaft cluster per test module that asks for it
  (tools/kafka/cluster.py), marked ``kafka`` as well.
- Airflow runs against an isolated ``AIRFLOW_HOME`` with a SQLite database migrated once per
  session (``airflow_db`` fixture); its tests are marked ``airflow``.
- ``spark-submit`` and ``airflow`` are found next to the running interpreter.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# Airflow reads its configuration when first imported, so the isolated home is set before any
# test module can import it.
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="airflow-home-"))
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO_ROOT / "dags")
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}"
# spark-submit, airflow and the executors' Python all come from this interpreter's environment.
_BIN_DIR = str(Path(sys.executable).parent)
os.environ["PATH"] = _BIN_DIR + os.pathsep + os.environ.get("PATH", "")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

# Test clients run in threads beside the engine's: kafka-python's response class table is kept
# intact from the start (streams/kafka/response_classes.py).
from airflow_stateful_provider.streams.kafka.response_classes import install_response_classes_kept  # noqa: E402

install_response_classes_kept()

#: The JVMs the tests start (Kafka brokers and their storage tool, spark-submit, Spark's
#: standalone daemons) live seconds to minutes and do little, and the suite is CPU-bound on 2
#: cores: the client compiler only and the serial collector. A broker then starts in 2.2 CPU-s
#: instead of 3.6, a small spark-submit in 6.4 instead of 10.4-11.3 (measured on 2 cores).
#: Benchmarks keep the JVMs' defaults.
TEST_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
for _variable in ("KAFKA_JVM_PERFORMANCE_OPTS", "SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    os.environ.setdefault(_variable, TEST_JVM_OPTS)
#: Spark's drivers and daemons start on the class archive ``make jars`` made (brokers find
#: theirs themselves): tools/class_archive.py.
from tools.spark_class_archive import spark_class_archive  # noqa: E402

for _variable in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    os.environ[_variable] = " ".join([os.environ[_variable], *spark_class_archive().options()])


#: The modules that take minutes, run first: the pytest workers take whole modules in
#: collection order (--dist loadfile with --no-loadscope-reorder: by default pytest-xdist
#: hands out the modules with the most tests first, which put these one-test modules last),
#: so one of these started last would keep one worker busy minutes after the others are
#: done. Longest first (seconds measured on 2 cores, before the test JVMs' options).
MODULES_FIRST = (
    "test_replicated_cluster.py",  # ~300 s: both guarantees' applications through the events on a 3-node cluster
    "test_wheel_install.py",       # ~220 s: a wheel built, installed with its dependencies in a fresh environment
    "test_broker_outages.py",      # ~210 s: the cluster down for two minutes (and past a task timeout)
    "test_airflow_services.py",    # ~170 s: Airflow's services and a Spark cluster
    "test_secured_pipeline_lineage.py",  # ~155 s: a secured broker, a DAG run submitting to Spark
    "test_high_availability.py",   # ~90 s: a probing rebalance at its 60 s minimum
    "test_exactly_once.py",        # ~90 s: kill -9 under both guarantees
    "test_retention_model.py",     # ~90 s: the retention model's examples on the broker
    "test_snapshot_spark.py",      # ~85 s: Spark executors snapshotting to S3
    "test_spark_cluster_failover.py",    # ~70 s: a standalone Spark cluster, an executor and a worker killed
)


def pytest_collection_modifyitems(config, items):
    """The modules of MODULES_FIRST before the others; each module's tests stay together and in
    their order."""
    def rank(item) -> int:
        name = item.path.name
        return MODULES_FIRST.index(name) if name in MODULES_FIRST else len(MODULES_FIRST)

    items[:] = sorted(items, key=rank)  # a stable sort


@pytest.fixture(scope="session")
def kafka_broker():
    """A real Kafka broker on a free loopback port, started once per test session."""
    from tools.kafka.broker import LocalKafkaBroker

    broker = LocalKafkaBroker(work_dir=Path(tempfile.mkdtemp(prefix="kafka-test-")))
    broker.start()
    print(f"\nKafka broker {broker.bootstrap_servers} started in {broker.start_seconds:.1f}s", file=sys.stderr)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def bootstrap_servers(kafka_broker) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory):
    """A real 3-node KRaft cluster (tools/kafka/cluster.py: replication factor 3, min ISR 2)
    for the module that asks for it; each pytest-xdist worker starts its own. Tests that stop,
    kill or freeze nodes start and thaw them again (the cluster's ``wait_healthy``)."""
    from tools.kafka.cluster import LocalKafkaCluster

    cluster = LocalKafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), nodes=3)
    cluster.start()
    print(f"\n3-node Kafka cluster {cluster.bootstrap_servers} started in {cluster.start_seconds:.1f}s",
          file=sys.stderr)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def secured_kafka(tmp_path_factory):
    """A second broker, started only for the tests that ask for it: mutual TLS, SASL
    OAUTHBEARER over TLS (unsecured JWTs) and TLS under a certificate for another host, with
    a self-signed CA and certificates made for the session (tests/integration/secured_kafka.py)."""
    from tests.integration.secured_kafka import SecuredKafka
    from tools.kafka.broker import LocalKafkaBroker, SecuredListeners
    from tools.kafka.certificates import CertificateAuthority

    directory = tmp_path_factory.mktemp("secured-kafka")
    ca = CertificateAuthority(directory / "tls")
    stranger = CertificateAuthority(directory / "stranger-tls", name="stranger").issue("stranger-client")
    listeners = SecuredListeners(keystore=ca.issue("broker", server=True).keystore,
                                 wrong_name_keystore=ca.issue("elsewhere", server=True,
                                                              hosts=("broker.invalid",)).keystore,
                                 truststore=ca.cert)
    broker = LocalKafkaBroker(work_dir=directory / "kafka", security=listeners)
    broker.start()
    print(f"\nsecured Kafka broker {broker.secured_ports} started in {broker.start_seconds:.1f}s", file=sys.stderr)
    try:
        yield SecuredKafka(broker, ca, ca.issue("streams-client", password="client-key-pa55"), stranger)
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Migrate the isolated SQLite metadata database once per test session."""
    result = subprocess.run([str(Path(_BIN_DIR) / "airflow"), "db", "migrate"], capture_output=True, text=True,
                            env=os.environ.copy())
    if result.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed in {_AIRFLOW_HOME}:\n"
                           f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return _AIRFLOW_HOME


@pytest.fixture
def spark_local_connection(monkeypatch):
    """``spark_default`` points at an embedded Spark with 2 cores."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')


@pytest.fixture(scope="session")
def example_dags(airflow_db):
    """The DAGs in dags/, loaded as Airflow's DAG processor would; any import error fails the test."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=REPO_ROOT / "dags")
    assert not bag.import_errors, f"DAG import errors: {bag.import_errors}"
    return bag


@pytest.fixture
def spark_cluster(tmp_path_factory):
    """A real Spark standalone cluster on loopback: a Master and two Workers of 2 task slots
    and 1 GB each (tools/spark_cluster.py); stopped, with every executor, after the test."""
    from tools.spark_cluster import LocalSparkCluster

    cluster = LocalSparkCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=2, memory="1g")
    cluster.start()
    print(f"\nSpark cluster {cluster.master_url} started in {cluster.start_seconds:.1f}s", file=sys.stderr)
    try:
        yield cluster
    finally:
        cluster.stop()
