"""A real single-node Apache Kafka broker (KRaft) on loopback, for tests, the demo and developers.

The broker jars come from Maven Central through ``tools/kafka/pom.xml`` and are resolved once
into ``tools/kafka/lib/``; every later start reuses them. Each start formats KRaft storage in a
fresh directory, so brokers never share state.

From Python::

    with LocalKafkaBroker() as broker:
        print(broker.bootstrap_servers)

With ``security=SecuredListeners(...)`` the broker also listens for secured clients (the
broker security tests, tests/integration/test_secured_connections.py): mutual TLS, SASL
OAUTHBEARER over TLS with unsecured JWTs, and TLS under a certificate that names another host.
PLAINTEXT stays the inter-broker listener, for the tests' own set-up.

From a shell (the Makefile uses this)::

    python -m tools.kafka.broker resolve      # also makes the brokers' class archive (tools/class_archive.py)
    python -m tools.kafka.broker start --dir .local/kafka     # prints the bootstrap servers
    python -m tools.kafka.broker stop --dir .local/kafka
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tools.class_archive import ClassArchive, ClassArchiveError
from tools.local_processes import (
    another_free_port,
    die_with_parent,
    free_loopback_port,
    own_process_group,
    port_in_use,
    terminate,
    wait_pid,
)

KAFKA_TOOLS_DIR = Path(__file__).resolve().parent
POM = KAFKA_TOOLS_DIR / "pom.xml"
LIB_DIR = KAFKA_TOOLS_DIR / "lib"
# Hash of the pom that produced lib/, so an edited pom re-resolves and an unchanged one does not.
RESOLVED_MARKER = LIB_DIR / ".resolved-from"

class BrokerError(RuntimeError):
    """The local broker could not be set up, started or stopped."""


class MissingToolError(BrokerError):
    """Java or Maven is not installed."""


#: What a local broker and each node of a local cluster set alike: topics, logs, groups and
#: transactions as tests, benchmarks and the demo need them.
LOCAL_BROKER_SETTINGS = {
    # Abort a timed-out transaction within a second (default: a check every 10 s).
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    # Topics are created explicitly by the engine and by tests; a typo must not create one.
    "auto.create.topics.enable": "false",
    "delete.topic.enable": "true",
    "log.segment.bytes": str(64 * 1024 * 1024),
    "log.cleaner.backoff.ms": "1000",
    # No record is deleted for its age: tests and examples write fixed timestamps (1970,
    # 2023), and the retention check (30 s after the start, then every 5 minutes) deleted
    # them under a running test. A topic's own retention.ms still applies.
    "log.retention.ms": "-1",
}


def _require_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingToolError(f"'{name}' not found on PATH: {hint}")
    return path


def require_java() -> str:
    return _require_tool("java", "install a Java 17+ runtime, e.g. `apt-get install openjdk-17-jre-headless`")


def require_maven() -> str:
    return _require_tool("mvn", "install Apache Maven, e.g. `apt-get install maven`")


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def resolve_jars(quiet: bool = True) -> Path:
    """Resolve the broker jars with Maven into ``lib/``, unless already resolved from this pom."""
    if RESOLVED_MARKER.exists() and RESOLVED_MARKER.read_text().strip() == _pom_digest():
        return LIB_DIR
    mvn = require_maven()
    require_java()
    if LIB_DIR.exists():
        shutil.rmtree(LIB_DIR)
    cmd = [
        mvn, "-B", "-f", str(POM), "dependency:copy-dependencies",
        f"-DoutputDirectory={LIB_DIR}", "-DincludeScope=runtime",
    ]
    if quiet:
        cmd.insert(1, "-q")
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise BrokerError(f"Maven could not resolve the Kafka broker jars ({' '.join(cmd)}):\n{tail}")
    RESOLVED_MARKER.write_text(_pom_digest() + "\n")
    return LIB_DIR


def _accepts_connections(port: int) -> bool:
    """A plain TCP probe, so the Kafka client is only used (and only logs) once the port is open."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _random_cluster_id() -> str:
    # Kafka cluster ids are 16 random bytes, url-safe base64 without padding. One in 64
    # starts with "-", which is why the format command passes it as --cluster-id=<id>.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` of a broker's log, for error messages."""
    if not path.exists():
        return "(no broker log was written)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def kafka_jvm(java: str, lib: Path, work_dir: Path, heap: str) -> list[str]:
    """The ``java`` command line (up to the main class) of a Kafka process logging to
    ``work_dir`` (its log4j2.properties is written there). Its collector and compiler options
    come from ``KAFKA_JVM_PERFORMANCE_OPTS`` as in Kafka's own scripts (default G1; the test
    suite starts brokers with cheaper ones, tests/conftest.py); the brokers' class archive
    (tools/class_archive.py) is used when there is one for this JVM and these jars."""
    (work_dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
    performance = os.environ.get("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:+UseG1GC").split()
    return [java, f"-Xmx{heap}", "-Xms128m", *performance, *broker_class_archive(java, lib).options(),
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={work_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={work_dir}", "-cp", f"{lib}/*"]


def format_storage(jvm: list[str], properties: Path, cluster_id: str, log_path: Path,
                   timeout: float = 120.0) -> None:
    """Format the KRaft storage ``properties`` names (kafka.tools.StorageTool), output to ``log_path``."""
    with open(log_path, "ab") as log:
        try:
            fmt = subprocess.run(jvm + ["kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                                        "-c", str(properties)], stdout=log, stderr=subprocess.STDOUT,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BrokerError(f"formatting KRaft storage for {properties} took more than {timeout:.0f}s:\n"
                              f"{log_tail(log_path)}") from None
    if fmt.returncode != 0:
        raise BrokerError(f"formatting KRaft storage for {properties} failed (exit {fmt.returncode}):\n"
                          f"{log_tail(log_path)}")


def spawn_kafka(jvm: list[str], properties: Path, log_path: Path, detached: bool) -> subprocess.Popen:
    """Start ``kafka.Kafka`` on ``properties``, output appended to ``log_path``; a detached one
    outlives this Python process, any other gets SIGTERM when it dies."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(jvm + ["kafka.Kafka", str(properties)], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                preexec_fn=own_process_group if detached else die_with_parent)


def wait_answers_metadata(process: subprocess.Popen, port: int, timeout: float, log_path: Path, what: str,
                          brokers: int = 1) -> None:
    """Wait until the Kafka process on ``port`` answers a metadata request naming at least
    ``brokers`` brokers; BrokerError (with the log tail) if it exits or ``timeout`` passes."""
    from kafka import KafkaAdminClient  # imported late: resolving jars must not need it
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError

    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BrokerError(f"{what} exited with code {process.returncode} during start-up (log {log_path}):\n"
                              f"{log_tail(log_path)}")
        if not _accepts_connections(port):
            time.sleep(0.2)
            continue
        try:
            admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=5000,
                                     bootstrap_timeout_ms=3000, client_id="broker-readiness")
            try:
                cluster = admin.describe_cluster()
            finally:
                admin.close()
            if len(cluster.get("brokers") or ()) >= brokers:
                return
            last_error = None
        except (KafkaConnectionError, KafkaTimeoutError, OSError) as exc:
            last_error = exc
        time.sleep(0.3)
    raise BrokerError(f"{what} on 127.0.0.1:{port} did not answer metadata requests naming {brokers} broker(s) "
                      f"within {timeout:.0f}s (last error: {last_error!r}); log tail:\n{log_tail(log_path)}")


@dataclasses.dataclass(frozen=True)
class SecuredListeners:
    """PEM files of the secured listeners (tools/kafka/certificates.py makes them):
    ``keystore`` (the broker's key and chain) for the mTLS and OAUTHBEARER listeners,
    ``wrong_name_keystore`` for the listener whose certificate names another host, and
    ``truststore`` (the CA that signs client certificates). The keys are not encrypted: Java
    17 cannot read PBES2-encrypted PEM keys."""

    keystore: Path
    wrong_name_keystore: Path
    truststore: Path


#: Listener name -> security protocol of the secured listeners.
SECURED_LISTENERS = {"MTLS": "SSL", "OAUTH": "SASL_SSL", "WRONGNAME": "SSL"}


class LocalKafkaBroker:
    """One KRaft broker+controller process on 127.0.0.1, with its storage in ``work_dir``.

    ``port`` defaults to a free loopback port. The broker log is ``work_dir/broker.log``; its
    tail is part of every start-up error.
    """

    def __init__(self, work_dir: str | os.PathLike | None = None, port: int | None = None,
                 start_timeout: float = 90.0, heap: str = "512m", detached: bool = False,
                 security: SecuredListeners | None = None, authorizer: bool = False,
                 jvm_options: tuple[str, ...] = ()) -> None:
        self._owns_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="kafka-"))
        self.port = port
        self.start_timeout = start_timeout
        self.heap = heap
        # A detached broker outlives the Python process that started it (``broker.py start``).
        self.detached = detached
        self.process: subprocess.Popen | None = None
        self.start_seconds: float | None = None
        self.security = security
        #: Kafka's StandardAuthorizer on: a principal of a secured listener may do only what ACLs
        #: allow (nothing by default); the plaintext listener's ANONYMOUS is a super user, for the
        #: tests' own set-up and oracles.
        self.authorizer = authorizer
        #: Port of each secured listener (SECURED_LISTENERS), once started with ``security``.
        self.secured_ports: dict[str, int] = {}
        #: Options of the broker's JVM beyond kafka_jvm's (not of its storage format's).
        self.jvm_options = jvm_options

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise BrokerError("the broker has not been started")
        return f"127.0.0.1:{self.port}"

    def secured_bootstrap_servers(self, listener: str) -> str:
        """``127.0.0.1:<port>`` of a secured listener: "MTLS", "OAUTH" or "WRONGNAME"."""
        if listener not in self.secured_ports:
            raise BrokerError(f"the broker has no started secured listener {listener!r}")
        return f"127.0.0.1:{self.secured_ports[listener]}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "broker.log"

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    # ---------------------------------------------------------------- start

    def start(self) -> LocalKafkaBroker:
        if self.process is not None:
            raise BrokerError("this broker is already started")
        began = time.monotonic()
        java = require_java()
        lib = resolve_jars()
        if self.port is None:
            self.port = free_loopback_port()
        elif port_in_use(self.port):
            raise BrokerError(f"port {self.port} on 127.0.0.1 is already in use; choose another or omit it")
        taken = {self.port}
        controller_port = another_free_port(taken)
        if self.security is not None:
            self.secured_ports = {name: another_free_port(taken) for name in SECURED_LISTENERS}

        if self.work_dir.exists() and any(self.work_dir.iterdir()):
            # A fresh directory for every start: never reuse another broker's storage.
            shutil.rmtree(self.work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        data_dir = self.work_dir / "data"
        properties = self.work_dir / "server.properties"
        properties.write_text(self._server_properties(data_dir, controller_port))
        jvm = kafka_jvm(java, lib, self.work_dir, self.heap)
        format_storage(jvm, properties, _random_cluster_id(), self.log_path)
        self.process = spawn_kafka([*jvm, *self.jvm_options], properties, self.log_path, self.detached)
        (self.work_dir / "broker.pid").write_text(f"{self.process.pid}\n")
        (self.work_dir / "bootstrap").write_text(self.bootstrap_servers + "\n")
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _server_properties(self, data_dir: Path, controller_port: int) -> str:
        listeners = {"PLAINTEXT": self.port, **self.secured_ports}
        protocols = {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT",
                     **{name: SECURED_LISTENERS[name] for name in self.secured_ports}}
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": ",".join([*(f"{name}://127.0.0.1:{port}" for name, port in listeners.items()),
                                   f"CONTROLLER://127.0.0.1:{controller_port}"]),
            "advertised.listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items()),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(f"{name}:{protocol}" for name, protocol in protocols.items()),
            "log.dirs": str(data_dir),
            "num.partitions": "1",
            # Internal topics on a single node, sized small so first use is quick.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            **LOCAL_BROKER_SETTINGS,
            **(self._secured_listener_properties() if self.security is not None else {}),
            **({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:ANONYMOUS", "allow.everyone.if.no.acl.found": "false"}
               if self.authorizer else {}),
        }
        return "".join(f"{k}={v}\n" for k, v in settings.items())

    def _secured_listener_properties(self) -> dict[str, str]:
        """mTLS (client certificates signed by the truststore's CA required), OAUTHBEARER over
        TLS (Kafka's unsecured JWT validator: an unsigned token with ``sub``, ``iat`` and a
        future ``exp``), and TLS under a certificate for another host name."""
        security = self.security
        assert security is not None
        settings: dict[str, str] = {}
        for name in SECURED_LISTENERS:
            prefix = f"listener.name.{name.lower()}."
            keystore = security.wrong_name_keystore if name == "WRONGNAME" else security.keystore
            settings.update({
                prefix + "ssl.keystore.type": "PEM",
                prefix + "ssl.keystore.location": str(keystore),
                prefix + "ssl.truststore.type": "PEM",
                prefix + "ssl.truststore.location": str(security.truststore),
                prefix + "ssl.client.auth": "required" if name == "MTLS" else "none",
            })
        settings.update({
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.oauth.oauthbearer.sasl.jaas.config":
                'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                'unsecuredLoginStringClaim_sub="broker";',
        })
        return settings

    def _wait_until_ready(self) -> None:
        """Wait until the broker answers a metadata request on its listener."""
        assert self.process is not None and self.port is not None
        wait_answers_metadata(self.process, self.port, self.start_timeout, self.log_path, "the Kafka broker")

    # ---------------------------------------------------------------- stop

    def stop(self) -> None:
        """Terminate the broker; kill it if it has not exited within the grace period."""
        process, self.process = self.process, None
        if process is None:
            return
        from tools.kafka.topics import close_kept_admins  # kafka-python only where clients are made

        close_kept_admins(self.bootstrap_servers)
        terminate(process.pid, process.wait)
        pid_file = self.work_dir / "broker.pid"
        pid_file.unlink(missing_ok=True)
        if self._owns_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> LocalKafkaBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def broker_class_archive(java: str, lib: Path) -> ClassArchive:
    """The class archive of the broker JVMs of ``java`` on the jars in ``lib`` (kept there)."""
    return ClassArchive("kafka", java, lib, lib)


def build_class_archive() -> Path:
    """The brokers' class archive of this JVM and these jars, made unless there is one: a
    broker started until it answers, then stopped, writes the classes it loaded."""
    def run_broker(dump_option: str) -> str:
        with tempfile.TemporaryDirectory(prefix="kafka-class-archive-") as scratch:
            broker = LocalKafkaBroker(Path(scratch) / "broker", jvm_options=(dump_option,))
            with broker:
                pass
            return broker.log_tail()

    return broker_class_archive(require_java(), resolve_jars()).make(run_broker)


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.kafka.broker",
                                     description="Local single-node Kafka broker (KRaft).")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("resolve", help="resolve the broker jars with Maven and make their class archive (once)")
    start = sub.add_parser("start", help="start a broker in the background; prints bootstrap servers")
    start.add_argument("--dir", required=True, help="work directory (wiped and formatted)")
    start.add_argument("--port", type=int, default=None)
    stop = sub.add_parser("stop", help="stop the broker started in --dir")
    stop.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "resolve":
            print(resolve_jars())
            print(build_class_archive())
        elif args.command == "start":
            broker = LocalKafkaBroker(args.dir, port=args.port, detached=True)
            broker.start()
            print(broker.bootstrap_servers)
            print(f"started in {broker.start_seconds:.1f}s, log {broker.log_path}", file=sys.stderr)
        elif args.command == "stop":
            pid_file = Path(args.dir) / "broker.pid"
            if not pid_file.exists():
                print(f"no broker is running from {args.dir}", file=sys.stderr)
                return 0
            pid = int(pid_file.read_text())
            terminate(pid, wait_pid(pid))
            pid_file.unlink(missing_ok=True)
    except (BrokerError, ClassArchiveError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
