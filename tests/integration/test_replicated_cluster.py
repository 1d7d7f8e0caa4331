"""Routine Kafka operations under running applications (issue 33's scenario), at both guarantees.

Two applications of a per-key counting topology (tests.integration.topologies:
configured_counts), one exactly_once_v2 and one at_least_once, two instance processes each, run
side by side on the 3-node cluster (tools/kafka/cluster.py: replication factor 3,
min.insync.replicas 2) while input keeps arriving, and the brokers go through what operators
and managed services do to them (each event hits both applications; their groups share one
coordinator): a rolling restart of every node with
SIGTERM, the application's group coordinator killed with SIGKILL (with the input partitions it
leads), each transaction coordinator of its producers killed, partition leaders moved, and the group
coordinator frozen (SIGSTOP) longer than both the broker and the consumer session timeouts,
then thawed.

Oracle:
- exactly-once: every key's output, read ``read_committed``, is exactly 1..n, n being the
  key's records in the input topic (what the brokers acknowledged, read back at the end);
  at-least-once: every count 1..n of every key is there (nothing lost), and the output
  records beyond one per input record are counted and printed;
- neither instance ends (the runner exits when its instance goes to ERROR), and both stop
  cleanly (exit 0) at the end;
- the group's committed offsets move again within 60 s of a node coming back (started again,
  or thawed), and also within 60 s of a node stopping or being killed (two of three nodes
  keep every partition available): waited for on that progress, never a fixed sleep. The
  longest pause between two advances of the committed offsets around each event is printed.

When the committed offsets stop moving, the instances are sent SIGABRT with Python's fault
handler on: the failure shows every thread's stack (where each waited) and the status
documents' blocked threads.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable

import pytest
from kafka import KafkaProducer

from airflow_stateful_provider.streams.processing.streams_producer import transactional_id
from tests.integration.counts_input import counts_input
from tools.instances import InstanceProcess
from tools.kafka.cluster import LocalKafkaCluster
from tools.kafka.topics import create_topics, end_offsets, read_all, read_committed_offsets
from tools.waits import wait_for_commits, wait_until

pytestmark = pytest.mark.kafka

TOPOLOGY = "tests.integration.topologies:configured_counts"
PARTITIONS = 4
KEYS = 200
#: input records per second while the brokers go through the events
RATE = 100
#: the consumers' session timeout; the frozen broker stays frozen longer than this and the nodes' (4 s)
SESSION_TIMEOUT_MS = 10_000
FREEZE_SECONDS = 20
#: processing must move again within this long after each event
RESUME_SECONDS = 60


class InputFlow(threading.Thread):
    """Sends numbered records (counts_input) at RATE per second with one idempotent acks=all
    producer until stopped. Records the brokers refused are counted, not retried: the oracle
    is the input topic as read back at the end."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        super().__init__(daemon=True, name="input-flow")
        self.bootstrap_servers, self.topic = bootstrap_servers, topic
        self.sent = self.failed = 0
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, acks="all", enable_idempotence=True,
                                     linger_ms=5)
            try:
                started, n = time.monotonic(), 0
                while not self._stop_event.is_set():
                    due = int((time.monotonic() - started) * RATE)
                    if due > n:
                        for key, value in counts_input(n, due - n, KEYS):
                            producer.send(self.topic, key=key.encode(), value=value.encode()).add_errback(
                                self._failed)
                        self.sent = n = due
                    self._stop_event.wait(0.05)
                producer.flush(timeout=120)
            finally:
                producer.close(timeout=30)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def _failed(self, _error: Exception) -> None:
        self.failed += 1

    def cancel(self) -> None:
        self._stop_event.set()

    def stop(self) -> None:
        self.cancel()
        self.join(180)
        assert not self.is_alive(), "the input producer did not finish within 180 s"
        assert self.error is None, f"the input producer failed: {self.error!r}"


class CommitWatch(threading.Thread):
    """Samples the group's committed offsets on the input topic twice a second (through the
    nodes that answer at the time; a sample the cluster cannot give now is skipped) and keeps
    when they advanced. One admin client serves while the answering nodes stay the same and
    it answers (a new one per sample cost the nodes and this process about 45 ms of CPU); one
    that did not answer is replaced, as its admin caches the group's coordinator for good."""

    def __init__(self, cluster: LocalKafkaCluster, group: str, topic: str) -> None:
        super().__init__(daemon=True, name="commit-watch")
        self.cluster, self.group, self.topic = cluster, group, topic
        self.total = 0
        #: monotonic times at which the committed total grew
        self.advances: list[float] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        with contextlib.ExitStack() as client:
            admin, nodes = None, None
            while not self._stop_event.wait(0.5):
                try:
                    answering = self.cluster.answering_nodes()
                    if admin is None or answering != nodes:
                        client.close()
                        admin, nodes = None, answering
                        admin = client.enter_context(self.cluster.admin())
                    offsets = read_committed_offsets(admin, self.group, self.topic)
                except Exception:  # noqa: BLE001 - no answer right now is what the events cause; skipped
                    offsets = {}
                if not offsets:  # no answer: kafka-python's admin would keep asking a coordinator that moved
                    client.close()
                    admin = None
                    continue
                total = sum(offsets.values())
                if total > self.total:
                    self.total = total
                    self.advances.append(time.monotonic())

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)

    def advanced_since(self, moment: float) -> bool:
        return bool(self.advances) and self.advances[-1] > moment

    def longest_pause(self, start: float, end: float) -> float:
        """The longest time in [start, end] without an advance of the committed offsets."""
        moments = [start, *(t for t in self.advances if start < t < end), end]
        return max(b - a for a, b in zip(moments, moments[1:], strict=False))


class Application:
    """One application of the scenario: its two instance processes, its input flow and the
    watch on its committed offsets."""

    def __init__(self, cluster: LocalKafkaCluster, app: str, guarantee: str, tmp_path) -> None:
        self.cluster, self.app, self.guarantee = cluster, app, guarantee
        self.source, self.sink = f"{app}-in", f"{app}-out"
        create_topics(cluster.bootstrap_servers, {self.source: PARTITIONS, self.sink: PARTITIONS},
                      replication_factor=3)
        self.names = [f"{guarantee}-a", f"{guarantee}-b"]
        self.instances = [InstanceProcess(TOPOLOGY, {
            "application_id": app, "bootstrap_servers": cluster.bootstrap_servers,
            "state_dir": str(tmp_path / name / "state"), "instance_id": name,
            "processing_guarantee": guarantee, "app_configs": {"input": self.source, "output": self.sink},
            # at-least-once commits every 30 s by default: the pauses are measured on commits
            **({"commit_interval_ms": 1_000} if guarantee == "at_least_once" else {}),
            "consumer_configs": {"session_timeout_ms": SESSION_TIMEOUT_MS}}, tmp_path, name) for name in self.names]
        self.flow = InputFlow(cluster.bootstrap_servers, self.source)
        self.watch = CommitWatch(cluster, app, self.source)
        #: event -> longest pause of the committed offsets (seconds)
        self.pauses: dict[str, float] = {}

    def start(self) -> None:
        for instance in self.instances:
            instance.start()
        self.flow.start()
        self.watch.start()

    def check_running(self) -> None:
        for instance in self.instances:
            instance.check_alive()

    def finish(self) -> None:
        """Input stopped, every input record committed, both instances stopped with exit 0."""
        self.flow.stop()
        self.watch.stop()
        print(f"{self.guarantee} input: {self.flow.sent} records sent, {self.flow.failed} refused by the brokers",
              flush=True)
        ends = end_offsets(self.cluster.bootstrap_servers, self.source)
        try:
            wait_for_commits(lambda: _committed(self.cluster, self.app, self.source), ends,
                             f"every {self.guarantee} input record to be committed", self.instances)
        except AssertionError as stalled:
            raise AssertionError(f"{stalled}\n{self.diagnose()}") from None
        codes = {instance.name: instance.stop() for instance in self.instances}
        assert codes == {name: 0 for name in self.names}, "\n".join(i.log_tail() for i in self.instances)

    def check_client_lines_held_back(self) -> None:
        """Through the broker restarts each instance logged Kafka client lines, each at most once
        a minute (streams/process_logging.py): kafka-python logs every failed reconnect of
        every client, dozens a second while a broker is down."""
        for instance in self.instances:
            log = instance.log_path.read_text(errors="replace").splitlines()
            lines, repeats = client_line_repeats(log, CLIENT_LINE_WINDOW_S)
            assert lines, f"{instance.name} logged no Kafka client line while brokers went down"
            assert not repeats, f"{instance.name} logged a Kafka client line again within a minute:\n" + \
                "\n".join(repeats[:20])

    def ensure_stopped(self) -> None:
        self.flow.cancel()
        self.watch.stop()
        for instance in self.instances:
            instance.ensure_stopped()

    def diagnose(self) -> str:
        """Every thread's stack of each running instance (SIGABRT with the fault handler on),
        the status documents' view, the cluster's partitions and the nodes' logs."""
        lines = [f"{self.app} ({self.guarantee}): committed total {self.watch.total}; partitions "
                 f"{self.cluster.partitions([self.source, '__consumer_offsets', '__transaction_state'])}"]
        try:
            from airflow_stateful_provider.streams import fetch_application_status

            status = fetch_application_status(self.cluster.bootstrap_servers, self.app, timeout_ms=10_000)
            for instance in status.instances:
                lines.append(f"status of {instance.instance_id}: {instance.state}, threads {instance.threads}")
        except Exception as exc:  # noqa: BLE001 - diagnostics only
            lines.append(f"(no status document: {exc!r})")
        for instance in self.instances:
            if instance.alive():
                instance.process.send_signal(signal.SIGABRT)
                instance.process.wait(30)
            lines.append(f"----- {instance.name}\n{instance.log_tail(150)}")
        return "\n".join(lines)

    def check_output(self) -> None:
        """exactly-once: every key's output is exactly 1..n; at-least-once: every count 1..n
        is there, the records beyond one per input record are counted."""
        expected = collections.Counter(record.key.decode() for record in read_all(self.cluster.bootstrap_servers,
                                                                                   self.source))
        outputs: dict[str, list] = collections.defaultdict(list)
        for record in read_all(self.cluster.bootstrap_servers, self.sink):
            outputs[record.key.decode()].append(record)
        seen = {key: [_count(record) for record in records] for key, records in outputs.items()}
        if self.guarantee == "exactly_once_v2":
            wrong = {key: counts for key, counts in seen.items() if counts != list(range(1, expected[key] + 1))}
            assert set(seen) == set(expected) and not wrong, \
                f"{len(wrong)} keys with output other than 1..n, e.g. {list(wrong.items())[:2]}; " \
                f"keys missing {sorted(set(expected) - set(seen))[:5]}\n{self.explain(outputs, wrong, expected)}"
            return
        # at-least-once: records processed again after a failure may repeat counts or count past n
        lost = {key: sorted(set(range(1, n + 1)) - set(seen.get(key, ()))) for key, n in expected.items()}
        lost = {key: missing for key, missing in lost.items() if missing}
        assert not lost, f"{len(lost)} keys lost counts, e.g. {list(lost.items())[:3]}"
        extra = sum(len(counts) for counts in seen.values()) - sum(expected.values())
        print(f"at-least-once: {extra} output records beyond one per input record "
              f"({sum(expected.values())} input records)")

    def explain(self, outputs: dict[str, list], wrong: dict[str, list[int]], expected: collections.Counter) -> str:
        """For the first wrong key: its outputs around the first wrong count, the output
        partition around them as written (committed, aborted, and the offsets neither read
        returns: transaction markers), and every instance's log lines about transactions,
        rollbacks and task moves from shortly before the first wrong output to a minute after."""
        if not wrong:
            return ""
        key = min(wrong)
        records = outputs[key]
        first = next((i for i, record in enumerate(records) if _count(record) != i + 1), len(records) - 1)
        around = records[max(0, first - 3):first + 3]
        lines = [f"{key}: {expected[key]} input records, {len(records)} outputs; around the first wrong one "
                 f"(partition, offset, count, time): "
                 + ", ".join(f"({r.partition}, {r.offset}, {_count(r)}, {_clock(r.timestamp / 1000)})"
                             for r in around)]
        partition, low, high = around[0].partition, around[0].offset, around[-1].offset
        committed = {r.offset for key_records in outputs.values() for r in key_records  # outputs: read committed
                     if r.partition == partition and low <= r.offset <= high}
        written = {r.offset for r in read_all(self.cluster.bootstrap_servers, self.sink, "read_uncommitted")
                   if r.partition == partition and low <= r.offset <= high}
        runs: list[list] = []
        for offset in range(low, high + 1):
            kind = "committed" if offset in committed else "aborted" if offset in written else "marker"
            if runs and runs[-1][0] == kind:
                runs[-1][2] = offset
            else:
                runs.append([kind, offset, offset])
        lines.append(f"partition {partition} offsets {low}-{high} as written: "
                     + ", ".join(f"{a}-{b} {kind}" if a != b else f"{a} {kind}" for kind, a, b in runs))
        lines += self.cluster.dump_log(self.sink, partition, low, high)
        since, until = around[0].timestamp / 1000 - 10, around[-1].timestamp / 1000 + 60
        for instance in self.instances:
            log = instance.log_path.read_text(errors="replace").splitlines() if instance.log_path.exists() else []
            lines.append(f"----- {instance.name}: transactions, rollbacks and assignments "
                         f"{_clock(since)}-{_clock(until)}")
            lines += [line for line in log if since <= _log_time(line) <= until and "ECONNREFUSED" not in line
                      and any(word in line for word in TRANSACTION_LOG_WORDS)][:150]
        return "\n".join(lines)


#: What the process log holds back a repeated Kafka client line for, less a second of slack
#: (the log's times are wall-clock, the filter's monotonic).
CLIENT_LINE_WINDOW_S = 60 - 1
HELD_BACK_COUNT = re.compile(r" \(\d+ more like this in the last \d+ s\)$")


def client_line_repeats(log: list[str], window_s: float) -> tuple[int, list[str]]:
    """(Kafka client lines in ``log``, those repeating one of the same logger, level and text
    within ``window_s``); log lines as the runner writes them: "date time LEVEL thread name: text"."""
    last: dict[tuple[str, str, str], float] = {}
    lines, repeats = 0, []
    for line in log:
        fields = line.split(" ", 4)
        if len(fields) < 5:
            continue
        name, _, text = fields[4].partition(": ")
        if name != "kafka" and not name.startswith("kafka."):
            continue
        lines += 1
        at, key = _log_time(line), (fields[2], name, HELD_BACK_COUNT.sub("", text))
        if key in last and at - last[key] < window_s:
            repeats.append(line)
        last[key] = at
    return lines, repeats


def _count(record) -> int:
    return int.from_bytes(record.value, "big", signed=True)


def _clock(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds).strftime("%H:%M:%S.%f")[:-3]


def _log_time(line: str) -> float:
    """The time of an instance log line ("2026-11-29 01:02:07,955 WARNING ..."); 0 for a line
    without one (a traceback's)."""
    try:
        return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return 0.0


#: what the exactly-once oracle's failure shows of each instance's log
TRANSACTION_LOG_WORDS = ("transaction", "rolling", "runs again", "producer", "assign", "revok", "lost", "fenc",
                         "ERROR", "WARNING")


class Scenario:
    """The events, each applied to the cluster under both applications at once."""

    def __init__(self, cluster: LocalKafkaCluster, applications: list[Application]) -> None:
        self.cluster, self.applications = cluster, applications

    def check_running(self) -> None:
        for application in self.applications:
            application.check_running()

    def wait_progress(self, what: str, since: float) -> None:
        """Until every application's committed offsets advance after ``since`` (every instance
        alive), at most RESUME_SECONDS; on a stall the instances dump their threads' stacks."""
        for application in self.applications:
            try:
                wait_until(lambda a=application: (self.check_running(), a.watch.advanced_since(since))[1],
                           max(0.0, RESUME_SECONDS - (time.monotonic() - since)),
                           f"{application.guarantee}'s committed offsets to move {what}", interval=0.25)
            except AssertionError as stalled:
                raise AssertionError(f"{stalled}\n{self.diagnose()}") from None

    def diagnose(self) -> str:
        return "\n".join([*(a.diagnose() for a in self.applications), self.cluster.logs(10)])

    def event(self, name: str, away: Callable[[], object], back: Callable[[], object] | None = None, *,
              progress_while_away: bool = True) -> None:
        """``away`` takes a node away (or changes the cluster), ``back`` brings it back; the
        committed offsets must move within RESUME_SECONDS after each (after ``away`` only with
        ``progress_while_away``: two of three nodes keep the cluster available)."""
        self.check_running()
        began = time.monotonic()
        away()
        if progress_while_away:
            self.wait_progress(f"after {name}", time.monotonic())
        if back is not None:
            back()
            self.cluster.wait_healthy(None)  # every topic in sync again before the next event
            self.wait_progress(f"after the node came back ({name})", time.monotonic())
        pauses = []
        for application in self.applications:
            application.pauses[name] = application.watch.longest_pause(began, time.monotonic())
            pauses.append(f"{application.guarantee} {application.pauses[name]:.1f}s")
        print(f"{name}: longest pause of the committed offsets {', '.join(pauses)} "
              f"(event took {time.monotonic() - began:.1f}s)", flush=True)


def same_coordinator_as(group: str, prefix: str) -> str:
    """A new application id on ``group``'s __consumer_offsets partition: the two groups always
    share their coordinator, so each coordinator event hits both applications."""
    while True:
        candidate = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if LocalKafkaCluster.offsets_partition(candidate) == LocalKafkaCluster.offsets_partition(group):
            return candidate


@pytest.mark.timeout(1500)  # a dozen events of up to 2 minutes each on a loaded machine (usually 4-6 minutes)
def test_rolling_restarts_coordinator_loss_leader_moves_and_a_frozen_broker(
        kafka_cluster: LocalKafkaCluster, tmp_path, monkeypatch):
    """Both guarantees in one run: an exactly-once and an at-least-once application, two
    instances each, go through the same events together."""
    cluster = kafka_cluster
    cluster.wait_healthy()
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")  # the instances dump their stacks on SIGABRT
    eos_app = f"replicated-eos-{uuid.uuid4().hex[:8]}"
    eos = Application(cluster, eos_app, "exactly_once_v2", tmp_path)
    alos = Application(cluster, same_coordinator_as(eos_app, "replicated-alos"), "at_least_once", tmp_path)
    applications = [eos, alos]
    cluster.wait_healthy([topic for a in applications for topic in (a.source, a.sink)])
    scenario = Scenario(cluster, applications)
    try:
        for application in applications:
            application.start()
        scenario.wait_progress("once the instances run", time.monotonic())
        for application in applications:
            wait_until(lambda a=application: (scenario.check_running(), a.watch.total >= 3 * RATE)[1], 120,
                       f"{3 * RATE} {application.guarantee} records committed before the first event")
        coordinator = cluster.group_coordinator(eos.app)
        assert cluster.group_coordinator(alos.app) == coordinator, "the two groups' coordinators differ"

        for node in sorted(cluster.nodes):  # rolling restart
            scenario.event(f"SIGTERM node {node}", lambda n=node: cluster.stop_node(n),
                           lambda n=node: cluster.start_node(n))
        # One SIGKILL takes the group coordinator and the leaders of input partitions at once
        # (each node leads some: a second node is killed only when this one leads none).
        coordinator = cluster.group_coordinator(eos.app)
        states = cluster.partitions([eos.source])
        led = sorted(p for (_, p), state in states.items() if state.leader == coordinator)
        scenario.event(f"SIGKILL group coordinator node {coordinator} (leader of {eos.source} partitions {led})",
                       lambda: cluster.kill_node(coordinator), lambda: cluster.start_node(coordinator))
        if not led:
            victim = cluster.leader(eos.source, 0)
            scenario.event(f"SIGKILL node {victim} (leader of {eos.source}-0)", lambda: cluster.kill_node(victim),
                           lambda: cluster.start_node(victim))
        transaction_coordinators = sorted({cluster.transaction_coordinator(transactional_id(eos.app, name, 1))
                                           for name in eos.names})
        for node in transaction_coordinators:
            scenario.event(f"SIGKILL transaction coordinator node {node}", lambda n=node: cluster.kill_node(n),
                           lambda n=node: cluster.start_node(n))

        def move_leaders() -> None:
            for topic in (eos.source, eos.sink, alos.source, alos.sink):
                states = cluster.partitions([topic])
                leader = states[(topic, 0)].leader
                cluster.move_leader(topic, 0, next(n for n in states[(topic, 0)].isr if n != leader))

        scenario.event("leaders of every input and output topic's partition 0 moved", move_leaders)
        coordinator = cluster.group_coordinator(eos.app)

        def freeze() -> None:
            cluster.freeze_node(coordinator)
            time.sleep(FREEZE_SECONDS)  # the event itself: frozen past the session timeouts

        # The event ends when the node is thawed: processing must move within 60 s of that
        # (the longest pause printed includes the time frozen).
        scenario.event(f"group coordinator node {coordinator} frozen {FREEZE_SECONDS}s",
                       freeze, lambda: cluster.thaw_node(coordinator), progress_while_away=False)

        for application in applications:
            application.finish()
    finally:
        for application in applications:
            application.ensure_stopped()

    for application in applications:
        print(f"{application.guarantee}: longest pause of the committed offsets per event:\n" +
              "\n".join(f"  {name}: {pause:.1f}s" for name, pause in application.pauses.items()))
    for application in applications:
        application.check_output()
        application.check_client_lines_held_back()


def _committed(cluster: LocalKafkaCluster, group: str, topic: str) -> dict[int, int]:
    with cluster.admin() as admin:
        return read_committed_offsets(admin, group, topic)



