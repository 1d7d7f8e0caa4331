"""Crash harness for the example pipeline (airflow_stateful_provider/examples) on a real broker.

What tests/integration/test_exactly_once.py puts together:

- :class:`Workload`: the generated input (examples/generator.py) and its oracle
  (examples/expected.py), computed in a niced child process while the instances run;
- :class:`Cluster`: the instance processes of one application, each with a stable
  ``instance_id`` and its own state directory, killed (SIGKILL) and restarted on it;
- :class:`Chaos`: a seeded schedule of kills, some aimed at an instance that is processing
  input right now (an active task of it is running and its input partition has lag), some
  0.5-2 s after another kill or restart (during the rebalance that follows);
- :func:`wait_fully_consumed`: the group's committed offsets cover every input and
  repartition record, waited for on progress (committed offsets and restored changelog
  records), never on a deadline near the normal run time;
- the outputs are counted per key against the oracle in output_verdict.py.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from airflow_stateful_provider.examples.clicks_and_payments import JOIN_NAME, ExampleSettings
from airflow_stateful_provider.examples.expected import SessionKey, expected_payments_usd, expected_sessions
from airflow_stateful_provider.examples.generator import RATE, GeneratedRecord, ensure_topics, generate, produce
from tools.instances import InstanceProcess
from tools.kafka.topics import read_committed_offsets
from tools.local_processes import process_cpu_seconds
from tools.waits import COMMITTED_AND_RESTORED, wait_progressing, wait_until

TOPOLOGY = "airflow_stateful_provider.examples.clicks_and_payments:build_topology"


# ---------------------------------------------------------------------------- input and oracle


@dataclasses.dataclass(frozen=True)
class Workload:
    """The generated input. A 10-minute session gap (2 minutes grace) keeps the event times
    of 130 clicks per user within the sessions retention (the oracle refuses more)."""

    seed: int = 4242
    users: int = 600
    clicks: int = 80_000
    payments: int = 10_000
    partitions: int = 4
    session_gap_ms: int = 10 * 60_000
    session_grace_ms: int = 2 * 60_000

    def records(self, now_ms: int) -> list[GeneratedRecord]:
        """In send order: every rate, then clicks and payments (same ``now_ms``, same records)."""
        return generate(self.seed, self.users, self.clicks, self.payments, now_ms=now_ms,
                        session_gap_ms=self.session_gap_ms, session_grace_ms=self.session_grace_ms)


@dataclasses.dataclass(frozen=True)
class Oracle:
    sessions: dict[SessionKey, dict[str, Any]]
    payments: dict[str, dict[str, Any]]


def compute_oracle(workload: Workload, now_ms: int) -> Oracle:
    """examples/expected.py over the workload's records (top level: runs in a child process)."""
    records = workload.records(now_ms)
    return Oracle(expected_sessions(records, workload.session_gap_ms, workload.session_grace_ms,
                                    partitions=workload.partitions),
                  expected_payments_usd(records, partitions=workload.partitions))


def _oracle_child(workload: Workload, now_ms: int, results: Any) -> None:
    os.nice(10)  # the instances under test come first on a small machine
    results.send(compute_oracle(workload, now_ms))


class BackgroundOracle:
    """The oracle (its cost grows with the square of the clicks: several seconds of one core
    for 40k) computed in a child process at low priority while the instances process the
    input; ``close`` ends the child even mid-computation (a test failing early)."""

    def __init__(self, workload: Workload, now_ms: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._results, child_end = context.Pipe(duplex=False)
        self._child = context.Process(target=_oracle_child, args=(workload, now_ms, child_end), daemon=True,
                                      name="crash-oracle")
        self._child.start()
        child_end.close()

    def result(self, stall: float = 60.0) -> Oracle:
        """Waits while the child computes (its CPU time grows: a niced child on a busy machine
        may take minutes), and fails if it stops computing or exits without a result."""
        child = self._child

        def ready() -> bool:
            if self._results.poll():
                return True
            if child.exitcode is not None:
                raise AssertionError(f"the oracle process exited with {child.exitcode} before its result")
            return False

        wait_progressing(ready, lambda: process_cpu_seconds(child.pid), "the oracle",
                         measure="CPU seconds of the oracle process", stall=stall, interval=0.5)
        return self._results.recv()

    def close(self) -> None:
        if self._child.is_alive():
            self._child.kill()
        self._child.join()
        self._results.close()


# ---------------------------------------------------------------------------- the application


@dataclasses.dataclass(frozen=True)
class App:
    """One run of the example application: its id prefixes every topic it uses."""

    application_id: str
    workload: Workload

    @property
    def settings(self) -> ExampleSettings:
        a = self.application_id
        return ExampleSettings(clicks_topic=f"{a}-clicks", payments_topic=f"{a}-payments", rates_topic=f"{a}-rates",
                               sessions_topic=f"{a}-sessions", payments_usd_topic=f"{a}-payments-usd",
                               session_gap_ms=self.workload.session_gap_ms,
                               session_grace_ms=self.workload.session_grace_ms)

    @property
    def app_configs(self) -> dict[str, Any]:
        s = self.settings
        return {"clicks_topic": s.clicks_topic, "payments_topic": s.payments_topic, "rates_topic": s.rates_topic,
                "sessions_topic": s.sessions_topic, "payments_usd_topic": s.payments_usd_topic,
                "session_gap_ms": s.session_gap_ms, "session_grace_ms": s.session_grace_ms}

    @property
    def repartition_topic(self) -> str:
        return f"{self.application_id}-{JOIN_NAME}-left-repartition"

    @property
    def consumed_topics(self) -> tuple[str, ...]:
        """Every topic the group reads: the three inputs and the repartition topic."""
        return (*self.settings.input_topics, self.repartition_topic)

    def create_topics(self, bootstrap_servers: str) -> None:
        s = self.settings
        ensure_topics(bootstrap_servers, s.input_topics + s.output_topics, self.workload.partitions)

    def produce(self, bootstrap_servers: str, records: Sequence[GeneratedRecord]) -> dict[str, int]:
        s = self.settings
        return produce(bootstrap_servers, records, clicks_topic=s.clicks_topic, payments_topic=s.payments_topic,
                       rates_topic=s.rates_topic, partitions=self.workload.partitions)

    def task_inputs(self, task_id: str) -> list[tuple[str, int]]:
        """The input partitions of a task of this topology (subtopology_partition)."""
        subtopology, _, partition = task_id.partition("_")
        topics = {"0": [self.settings.clicks_topic],
                  "1": [self.settings.rates_topic, self.repartition_topic],
                  "2": [self.settings.payments_topic]}.get(subtopology, [])
        return [(topic, int(partition)) for topic in topics]


def split_input(records: Sequence[GeneratedRecord],
                waves: int) -> tuple[list[GeneratedRecord], list[list[GeneratedRecord]]]:
    """(the rates, the clicks and payments in ``waves`` consecutive slices of send order)."""
    rates = [r for r in records if r.kind == RATE]
    rest = [r for r in records if r.kind != RATE]
    size = -(-len(rest) // waves)
    return rates, [rest[i:i + size] for i in range(0, len(rest), size)]


class WaveProducer(threading.Thread):
    """Sends each wave at its delay (seconds after start()); a failure is kept for ``join_checked``."""

    def __init__(self, app: App, bootstrap_servers: str, waves: Sequence[tuple[float, Sequence[GeneratedRecord]]],
                 timeline: Timeline) -> None:
        super().__init__(daemon=True, name="wave-producer")
        self.app, self.bootstrap_servers, self.waves, self.timeline = app, bootstrap_servers, waves, timeline
        self.error: BaseException | None = None
        self._cancelled = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        try:
            for number, (delay, records) in enumerate(self.waves, 1):
                if self._cancelled.wait(max(0.0, started + delay - time.monotonic())):
                    return
                sent = self.app.produce(self.bootstrap_servers, records)
                self.timeline.add(f"wave {number} sent: {sent}")
        except BaseException as exc:  # noqa: BLE001 - reported by join_checked
            self.error = exc

    def cancel(self) -> None:
        self._cancelled.set()

    def join_checked(self, timeout: float) -> None:
        self.join(timeout)
        if self.is_alive():
            raise AssertionError(f"the input waves were not sent within {timeout}s")
        if self.error is not None:
            raise AssertionError(f"sending the input failed: {self.error!r}") from self.error


class Timeline:
    """What the harness did, with seconds since the start: printed and shown on failure."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def add(self, text: str) -> None:
        with self._lock:
            self.lines.append(f"{time.monotonic() - self.started:7.2f}s  {text}")

    def __str__(self) -> str:
        with self._lock:
            return "\n".join(self.lines)


# ---------------------------------------------------------------------------- instances


class Cluster:
    """The instance processes; ``restart`` starts a killed one again on its state directory,
    with the next ``instance_epoch`` as a supervisor would."""

    def __init__(self, app: App, bootstrap_servers: str, work_dir: Path, names: Sequence[str],
                 config: dict[str, Any], timeline: Timeline) -> None:
        self.app, self.timeline = app, timeline
        self.instances: dict[str, InstanceProcess] = {}
        for name in names:
            self.instances[name] = InstanceProcess(TOPOLOGY, {
                "application_id": app.application_id, "bootstrap_servers": bootstrap_servers,
                "state_dir": str(work_dir / name / "state"), "instance_id": name, "instance_epoch": 0,
                "app_configs": app.app_configs, **config}, work_dir, name)
        self.kills = 0
        self.pids: dict[str, int] = {}
        #: the instances that should be running (started and not killed since)
        self.up: set[str] = set()

    def start_all(self) -> None:
        for name in self.instances:
            self._start(name)

    def _start(self, name: str) -> None:
        instance = self.instances[name]
        instance.start()
        self.pids[name] = instance.process.pid
        self.up.add(name)
        self.timeline.add(f"{name} started (pid {instance.process.pid}, epoch {instance.config['instance_epoch']})")

    def alive(self) -> list[str]:
        return [name for name, instance in self.instances.items() if instance.alive()]

    def kill(self, name: str, why: str) -> None:
        self.up.discard(name)
        self.instances[name].kill()
        self.kills += 1
        self.timeline.add(f"KILL {self.kills}: {name} (SIGKILL; {why})")

    def restart(self, name: str) -> None:
        instance = self.instances[name]
        assert not instance.alive(), f"{name} is running"
        instance.config["instance_epoch"] += 1
        self._start(name)

    def check_running(self) -> None:
        """Every instance not killed runs; one that ended by itself fails with its log."""
        for name in sorted(self.up):
            self.instances[name].check_alive()

    def stop_all(self, timeout: float = 60) -> dict[str, int]:
        """SIGTERM every instance at once (exactly once: a second one could hit the process
        while its interpreter shuts down, with the default handler back), then wait for each;
        returns the exit codes. One still running after ``timeout`` is killed and reported."""
        self.check_running()
        running = [self.instances[name] for name in sorted(self.up)]
        for instance in running:
            instance.process.send_signal(signal.SIGTERM)
        self.up.clear()
        deadline = time.monotonic() + timeout
        codes = {}
        for instance in running:
            try:
                codes[instance.name] = instance.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                instance.process.kill()
                instance.process.wait(timeout=30)
                raise AssertionError(f"{instance.name} did not stop within {timeout}s of SIGTERM\n{self.logs()}") \
                    from None
        self.timeline.add(f"stopped (SIGTERM), exit codes {codes}")
        return codes

    def ensure_stopped(self) -> None:
        for instance in self.instances.values():
            instance.ensure_stopped()

    def restored_records(self) -> int:
        """Changelog records the instances restored, all their runs together."""
        return sum(instance.restored_records() for instance in self.instances.values())

    def logs(self, lines: int = 40) -> str:
        """The last lines of every instance's log (all of its runs), without the warnings about
        late clicks (thousands, expected: the generator sends some far too late)."""
        out = []
        for name, instance in self.instances.items():
            text = instance.log_path.read_text(errors="replace") if instance.log_path.exists() else ""
            kept = [line for line in text.splitlines() if _LATE_CLICK not in line]
            out.append(f"----- {name}: last {lines} of {len(kept)} log lines ({len(text.splitlines()) - len(kept)} "
                       f"late-click warnings left out), {instance.log_path}")
            out += kept[-lines:]
        return "\n".join(out)


_LATE_CLICK = "streams.dsl.dropped: skipping record (late)"


# ---------------------------------------------------------------------------- offsets


class OffsetWatch:
    """The group's committed offsets and the end offsets of the topics it reads, with the
    same clients for the whole test."""

    def __init__(self, bootstrap_servers: str, app: App) -> None:
        self.bootstrap_servers, self.app = bootstrap_servers, app
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
        #: read_uncommitted: its end offsets are the high watermarks
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
        #: read_committed: its end offsets are the last stable offsets; reads skip aborted records
        self.committed_reader = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                                              isolation_level="read_committed", fetch_max_wait_ms=100)

    def close(self) -> None:
        for client in (self.admin, self.consumer, self.committed_reader):
            client.close()

    def committed(self, topic: str) -> dict[int, int]:
        return read_committed_offsets(self.admin, self.app.application_id, topic)

    def committed_total(self, topics: Iterable[str] | None = None) -> int:
        """The group's committed offsets summed over ``topics`` (default: every topic it reads)."""
        return sum(sum(self.committed(topic).values()) for topic in (topics or self.app.consumed_topics))

    def partitions(self, topic: str) -> list[TopicPartition]:
        found = self.consumer.partitions_for_topic(topic)
        if not found:
            self.consumer.topics()  # refresh metadata (a topic the instances just created)
            found = self.consumer.partitions_for_topic(topic) or set()
        return [TopicPartition(topic, p) for p in sorted(found)]

    def ends(self, topic: str) -> dict[int, int]:
        """High watermarks (what has been written, transactional or not)."""
        tps = self.partitions(topic)
        return {tp.partition: o for tp, o in self.consumer.end_offsets(tps).items()} if tps else {}

    def last_stable(self, topic: str) -> dict[int, int]:
        """Last stable offsets: below them no transaction is open."""
        tps = self.partitions(topic)
        return {tp.partition: o for tp, o in self.committed_reader.end_offsets(tps).items()} if tps else {}

    def lag(self, topic: str) -> dict[int, int]:
        """End offset minus committed offset per partition (no committed offset counts as 0)."""
        committed = self.committed(topic)
        return {p: end - committed.get(p, 0) for p, end in self.ends(topic).items()}

    def unconsumed(self, topic: str) -> dict[int, str]:
        """Partitions of ``topic`` the group has not consumed to the end, with why.

        Done means committed == end offset; or, when the topic holds transaction markers
        (exactly-once writes to the repartition topic), that no open transaction remains
        (last stable offset == high watermark) and a ``read_committed`` read from the
        committed offset finds no record before the end: only markers or aborted records
        lie behind it."""
        committed = self.committed(topic)
        ends = self.ends(topic)
        behind = {p: end for p, end in ends.items() if committed.get(p, 0) < end}
        if not behind:
            return {}
        probe = self.committed_reader
        tps = [TopicPartition(topic, p) for p in sorted(behind)]
        probe.assign(tps)
        stable = probe.end_offsets(tps)  # read_committed: the last stable offsets
        why: dict[int, str] = {}
        pending = []
        for tp in tps:
            start = committed.get(tp.partition, 0)
            if stable[tp] < behind[tp.partition]:
                why[tp.partition] = (f"committed {start}, end {behind[tp.partition]}, open transaction "
                                     f"(last stable offset {stable[tp]})")
            else:
                probe.seek(tp, start)
                pending.append(tp)
        deadline = time.monotonic() + 10
        found: Counter[int] = Counter()
        while pending and time.monotonic() < deadline:
            for tp, records in probe.poll(timeout_ms=200).items():
                found[tp.partition] += sum(1 for r in records if r.offset < stable[tp])
            pending = [tp for tp in pending if probe.position(tp) < stable[tp] and not found[tp.partition]]
        for tp in tps:
            if tp.partition in why:
                continue
            if found[tp.partition] or tp in pending:
                why[tp.partition] = f"committed {committed.get(tp.partition, 0)}, end {behind[tp.partition]}"
        return why


def wait_for_app(watch: OffsetWatch, cluster: Cluster, done: Callable[[], bool], what: str,
                 context: Callable[[], str], stall: float = 60, interval: float = 0.5) -> float:
    """Until ``done()``; fails when the application made no progress (the group's committed
    offsets on every topic it reads, plus the changelog records ``cluster``'s instances
    restored) for ``stall`` seconds. 60 s is longer than a rebalance after a kill, a
    restoration's start or an open transaction's timeout (10 s)."""
    return wait_progressing(done, lambda: watch.committed_total() + cluster.restored_records(), what,
                            measure=COMMITTED_AND_RESTORED, stall=stall,
                            context=context, interval=interval)


def wait_fully_consumed(watch: OffsetWatch, cluster: Cluster, timeline: Timeline) -> float:
    """Until the group's committed offsets cover every record of the input and repartition
    topics (see OffsetWatch.unconsumed), waited for with :func:`wait_for_app`; every instance
    must keep running meanwhile."""
    state: dict[str, Any] = {}
    next_progress = [time.monotonic()]

    def done() -> bool:
        cluster.check_running()
        if time.monotonic() >= next_progress[0]:
            next_progress[0] += 10
            lags = {topic.removeprefix(watch.app.application_id + "-"): sum(watch.lag(topic).values())
                    for topic in watch.app.consumed_topics}
            timeline.add(f"records not yet committed: {lags}")
        state.clear()
        for topic in watch.app.consumed_topics:
            behind = watch.unconsumed(topic)
            if behind:
                state[topic] = behind
                return False
        return True

    waited = wait_for_app(watch, cluster, done, "the group to commit every input and repartition record",
                          lambda: f"not consumed: {state}\n{timeline}\n{cluster.logs()}")
    timeline.add(f"every input and repartition record committed (waited {waited:.1f}s)")
    return waited


# ---------------------------------------------------------------------------- chaos


class Chaos:
    """Seeded kills and restarts while the input is processed (see module docstring).

    Each round kills a processing instance, then one more instance 0.5-2 s later: after
    the first kill (two down at once, during the rebalance the kill causes) or after the
    first victim's restart (possibly the restarted instance itself while it restores).
    Killed instances come back 0.5-2 s later on their state directory."""

    def __init__(self, cluster: Cluster, watch: OffsetWatch, seed: int, timeline: Timeline) -> None:
        self.cluster, self.watch, self.timeline = cluster, watch, timeline
        self.rng = random.Random(seed)
        self.processing_kills = 0
        self.fallback_kills = 0

    def _sleep(self, low: float, high: float) -> None:
        """Sleep a random time; the instances not killed must stay up meanwhile."""
        deadline = time.monotonic() + self.rng.uniform(low, high)
        while (left := deadline - time.monotonic()) > 0:
            self.cluster.check_running()
            time.sleep(min(left, 0.1))

    def run(self, rounds: int) -> None:
        for number in range(rounds):
            self._sleep(1.5, 3.5)
            first = self._kill_processing()
            if number % 2 == 0:  # a second kill during the rebalance the first one started
                self._sleep(0.5, 2.0)
                second = self._kill_any(exclude=first, why="0.5-2 s after the previous kill")
                self._sleep(0.5, 2.0)
                self.cluster.restart(first)
                self._sleep(0.5, 2.0)
                self.cluster.restart(second)
            else:  # a kill during the rebalance the restart started
                self._sleep(0.5, 2.0)
                self.cluster.restart(first)
                self._sleep(0.5, 2.0)
                second = self._kill_any(exclude=None, why="0.5-2 s after the previous restart")
                self._sleep(0.5, 2.0)
                self.cluster.restart(second)

    def _kill(self, name: str, why: str) -> None:
        self.cluster.kill(name, why)

    def _kill_any(self, exclude: str | None, why: str) -> str:
        candidates = sorted(n for n in self.cluster.alive() if n != exclude)
        victim = self.rng.choice(candidates)
        self._kill(victim, why)
        return victim

    def _kill_processing(self, wait: float = 10.0) -> str:
        """Kill an instance that is processing: its status document (published by this very
        process) shows a running active task whose input partition has uncommitted records.
        After ``wait`` seconds without one, any running instance (counted as a fallback)."""
        deadline = time.monotonic() + wait
        while True:
            self.cluster.check_running()
            busy = self._processing_instances()
            if busy:
                victim = self.rng.choice(sorted(busy))
                self.processing_kills += 1
                self._kill(victim, f"processing: {busy[victim]}")
                return victim
            if time.monotonic() > deadline:
                self.fallback_kills += 1
                return self._kill_any(exclude=None, why=f"no instance seen processing within {wait}s")
            time.sleep(0.2)

    def _processing_instances(self) -> dict[str, str]:
        from airflow_stateful_provider.streams.errors import StreamsError
        from airflow_stateful_provider.streams.status.reader import read_status_documents

        try:
            documents = read_status_documents(self.watch.bootstrap_servers, self.cluster.app.application_id,
                                              timeout_ms=5_000, allow_empty=True)
        except StreamsError:
            return {}
        lags: dict[str, dict[int, int]] = {}
        busy: dict[str, str] = {}
        for name, document in documents.items():
            if name not in self.cluster.alive() or document.pid != self.cluster.pids.get(name):
                continue  # not running, or the document of a killed predecessor
            if document.state != "RUNNING":
                continue
            working = []
            for task in document.tasks:
                if task.role != "active" or task.state != "running":
                    continue
                for topic, partition in self.cluster.app.task_inputs(task.task_id):
                    if topic not in lags:
                        lags[topic] = self.watch.lag(topic)
                    # exactly-once: a commit marker may trail the records written to the repartition topic
                    if lags[topic].get(partition, 0) > (1 if topic == self.cluster.app.repartition_topic else 0):
                        working.append(f"{task.task_id} ({topic}[{partition}] lag {lags[topic][partition]})")
                        break
            if working:
                busy[name] = "active " + ", ".join(working)
        return busy


def wait_no_open_transactions(watch: OffsetWatch, topics: Iterable[str], timeout: float) -> None:
    """Until the last stable offset of every partition equals its high watermark."""
    state: dict[str, Any] = {}

    def stable() -> bool:
        state.clear()
        for topic in topics:
            high = watch.ends(topic)
            lso = watch.last_stable(topic)
            open_ = {p: (lso[p], high[p]) for p in high if lso[p] < high[p]}
            if open_:
                state[topic] = open_
        return not state

    wait_until(stable, timeout, "no open transaction on the output topics",
               lambda: f"(last stable offset, high watermark) by partition: {state}", interval=0.5)
