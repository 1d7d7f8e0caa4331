"""Interactive queries on the real broker (docs/interactive-queries.md): two instances in
this process, one standby each, exactly-once, while input flows.

The oracle of every answer is the input itself: a count answered at position P (next
offset per input partition) must equal the number of input records of that key in its
partition below P, which is what a store stopped at P holds. Answers come in-process
(``KafkaStreams.query``), over the query topics (``query_application``, the hook, the CLI).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from airflow_stateful_provider.streams import (
    InstanceNotRunningError,
    KafkaStreams,
    KafkaStreamsState,
    KeyQuery,
    Position,
    PositionBound,
    QueryTimeoutError,
    RangeQuery,
    StateQueryRequest,
    StreamsConfig,
    TaskNotAvailableError,
    UnknownApplicationError,
    UnknownStoreError,
    committed_position,
    fetch_application_status,
    query_application,
)
from airflow_stateful_provider.streams.processor import Processor
from airflow_stateful_provider.streams.topology.store_builders import Stores
from airflow_stateful_provider.streams.topology.topology import Topology
from tools.kafka.topics import committed_offsets, create_topics, end_offsets, produce, read_all
from tools.waits import wait_for_commits, wait_progressing, wait_until

pytestmark = pytest.mark.kafka

PARTITIONS = 4
KEYS = [f"k{n:02d}" for n in range(12)]


class _CountAndKeep(Processor):
    """Counts records per key ("counts") and keeps each key's value by record time ("values")."""

    def init(self, context):
        self.counts = context.get_state_store("counts")
        self.values = context.get_state_store("values")

    def process(self, record):
        self.counts.put(record.key, (self.counts.get(record.key) or 0) + 1)
        self.values.put(record.key, record.value, record.timestamp)


def _topology(topic: str) -> Topology:
    topology = Topology().add_source("in", topic, key_serde="string", value_serde="string")
    topology.add_processor("count", _CountAndKeep, "in")
    topology.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string",
                                                            "int64"), "count")
    topology.add_state_store(Stores.versioned_key_value_store_builder(
        Stores.persistent_versioned_key_value_store("values", 10**12), "string", "string"), "count")
    return topology


class _App:
    def __init__(self, bootstrap_servers: str, tmp_path) -> None:
        self.servers = bootstrap_servers
        self.id = f"iq-{uuid.uuid4().hex[:8]}"
        self.topic = f"{self.id}-in"
        create_topics(bootstrap_servers, {self.topic: PARTITIONS})
        # Every record is dated from an hour ago on: topics delete (input) or compact
        # (changelogs) records by their timestamps against the wall clock, so records dated
        # 1970 could vanish from the input before the oracle reads it, and versions of the
        # versioned store from its changelog before a task move restores it.
        self.t0 = int(time.time() * 1000) - 3_600_000
        produce(bootstrap_servers, self.topic, [(k, "v0", self.t0) for k in KEYS])
        # the versioned store's history of key "price": a, b, c 10 s apart
        produce(bootstrap_servers, self.topic, [("price", v, self.t0 + ts) for v, ts in (("a", 10_000),
                                                                                         ("b", 20_000),
                                                                                         ("c", 30_000))])
        self.instances = {name: KafkaStreams(_topology(self.topic), StreamsConfig(
            application_id=self.id, bootstrap_servers=bootstrap_servers, state_dir=str(tmp_path / name),
            instance_id=name, processing_guarantee="exactly_once_v2", num_standby_replicas=1,
            commit_interval_ms=100, status_interval_ms=300,
            consumer_configs={"session_timeout_ms": 10_000})) for name in ("iq-0", "iq-1")}

    def start(self) -> None:
        for streams in self.instances.values():
            streams.start()
        wait_until(self._placed, 120, "every task running with one caught-up standby on the other instance")
        wait_for_commits(lambda: committed_offsets(self.servers, self.id, self.topic),
                         end_offsets(self.servers, self.topic), "the first input processed and committed")

    def _placed(self) -> bool:
        if any(s.state is not KafkaStreamsState.RUNNING for s in self.instances.values()):
            return False
        try:
            status = fetch_application_status(self.servers, self.id)
        except Exception:  # noqa: BLE001 - no document yet
            return False
        return len(status.tasks) == PARTITIONS and all(
            t.state == "running" and t.active is not None and len(t.standbys) == 1
            and t.standbys[0].instance_id != t.active.instance_id for t in status.tasks)

    @contextmanager
    def flowing(self) -> Iterator[None]:
        """Input keeps arriving (small batches over every key) while the body runs."""
        stop = threading.Event()

        def send() -> None:
            n = 0
            while not stop.is_set():
                produce(self.servers, self.topic, [(KEYS[(n + i) % len(KEYS)], f"v{n + i}", self.t0 + 60_000 + n + i)
                                                   for i in range(20)], linger_ms=5)
                n += 20

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            yield
        finally:
            stop.set()
            sender.join(60)

    def oracle(self) -> dict[tuple[int, str], list[int]]:
        """Per (partition, key), the offsets of its input records."""
        offsets: dict[tuple[int, str], list[int]] = {}
        for record in read_all(self.servers, self.topic):
            offsets.setdefault((record.partition, record.key.decode()), []).append(record.offset)
        return offsets

    def close(self) -> None:
        for streams in self.instances.values():
            streams.close(timeout=60)


def _count_below(oracle: dict, partition: int, key: str, position: int | None) -> int:
    """What a store stopped at ``position`` counted for ``key``: its records below it."""
    assert position is not None, f"an answer holding {key!r} of partition {partition} names no position there"
    return sum(1 for offset in oracle.get((partition, key), ()) if offset < position)


@pytest.fixture
def app(bootstrap_servers, tmp_path):
    running = _App(bootstrap_servers, tmp_path)
    try:
        running.start()
        yield running
    finally:
        running.close()


def test_key_and_range_answers_equal_the_input_below_their_position(app):
    """In-process key queries at the owner, remote range pages, while input flows."""
    key_answers, range_answers = [], []
    with app.flowing():
        for key in KEYS:
            where = app.instances["iq-0"].query_metadata_for_key("counts", key)
            other = next(name for name in app.instances if name != where.active_instance)
            assert where.standby_instances == (other,)
            request = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(key))
            answer = app.instances[where.active_instance].query(request).only_partition_result()
            assert answer.is_success, answer.failure
            assert (answer.partition, answer.task_id, answer.standby) == (where.partition, where.task_id, False)
            key_answers.append((key, answer))
            elsewhere = app.instances[other].query(request).only_partition_result()
            assert elsewhere.failure_reason == "not_owned"
        token, pages = None, 0
        while True:
            page = query_application(app.servers, app.id, StateQueryRequest.in_store("counts").with_query(
                RangeQuery.with_no_bounds().with_limit(5).with_continuation(token)), timeout_ms=20_000)
            range_answers.append(page)
            pages += 1
            token = page.continuation
            if token is None:
                break
        # read-your-writes: a bound at the committed offsets is met; one far ahead fails "position"
        key, answer = key_answers[0]
        request = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(key))
        committed = committed_position(app.servers, app.id)
        assert committed.offset(app.topic, answer.partition) is not None
        met = query_application(app.servers, app.id, request.with_position_bound(PositionBound.at(committed)),
                                timeout_ms=20_000).only_partition_result()
        assert met.is_success and met.position.dominates(committed, within={(app.topic, answer.partition)})
        ahead = Position.of({(app.topic, answer.partition): 10**9})
        behind = query_application(app.servers, app.id, request.with_position_bound(PositionBound.at(ahead)),
                                   timeout_ms=20_000).only_partition_result()
        assert behind.failure_reason == "position" and "behind the position bound" in behind.failure
        key_answers.append((key, met))
    oracle = app.oracle()
    for key, answer in key_answers:
        position = answer.position.offset(app.topic, answer.partition)
        assert position is not None and answer.result == _count_below(oracle, answer.partition, key, position), key
    seen = []
    for page in range_answers:
        for partition, result in page.partition_results.items():
            position = result.position.offset(app.topic, partition)
            for row in result.result:
                assert row["value"] == _count_below(oracle, partition, row["key"], position), (partition, row)
        seen += [row["key"] for row in page.records()]
    assert seen == sorted(KEYS + ["price"]) and pages == 3  # 13 keys in pages of 5, in key order


def test_as_of_reads_the_version_valid_then_through_the_cli_and_the_hook(app, monkeypatch):
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "airflow_stateful_provider.cli", "query", app.id, *args,
                               "--bootstrap-servers", app.servers, "--json"], capture_output=True, text=True,
                              timeout=120)

    t0 = app.t0
    done = cli("values", "price", "--as-of", str(t0 + 25_000))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["value"] == {"value": "b", "timestamp": t0 + 20_000, "valid_to": t0 + 30_000}
    latest = json.loads(cli("values", "price").stdout)  # a plain key on a versioned store: the latest
    assert latest["value"] == {"value": "c", "timestamp": t0 + 30_000, "valid_to": None}
    before = json.loads(cli("values", "price", "--as-of", str(t0 + 9_999)).stdout)
    assert (before["found"], before["value"]) == (False, None)
    missing = cli("nope", "price")
    assert missing.returncode == 1 and "no store 'nope'" in missing.stderr and "Traceback" not in missing.stderr

    from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook

    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT",
                       json.dumps({"conn_type": "stateful_streams", "host": app.servers}))
    counted = StatefulStreamsHook().query_store(app.id, "counts", "k03")
    assert (counted["found"], counted["value"], counted["standby"]) == (True, 1, False)


def test_a_standby_answers_within_its_lag_bound_only(app):
    status = fetch_application_status(app.servers, app.id)
    standby_of = {t.standbys[0].instance_id: int(t.task_id.split("_")[1]) for t in status.tasks}
    name, partition = next(iter(standby_of.items()))
    streams = app.instances[name]
    range_of_partition = StateQueryRequest.in_store("counts").with_query(RangeQuery()).with_partitions({partition})
    with app.flowing():
        for bound in (0, 5, 10**6):
            for _ in range(5):
                result = streams.query(range_of_partition.with_stale_reads(bound)).partition_results[partition]
                assert result.standby
                if result.is_success:
                    assert result.lag <= bound
                else:
                    assert result.failure_reason == "lagging" and (result.lag > bound or "not known" in
                                                                     result.failure)
        assert streams.query(range_of_partition.with_stale_reads(10**6)).partition_results[partition].is_success
    oracle = app.oracle()
    expected = {key: len(offsets) for (p, key), offsets in oracle.items() if p == partition}

    last: list = []

    def caught_up() -> bool:
        result = streams.query(range_of_partition.with_stale_reads(0)).partition_results[partition]
        last[:] = [result]
        assert result.failure_reason != "not_owned", f"{name} no longer holds partition {partition}: {result}"
        return result.is_success and {kv.key: kv.value for kv in result.result} == expected

    def context() -> str:
        found = {kv.key: kv.value for kv in last[0].result or ()} if last else {}
        return (f"standby of partition {partition} on {name}: {last and last[0]}\nexpected {expected}\n"
                f"differing {sorted(k for k in set(found) | set(expected) if found.get(k) != expected.get(k))}")

    wait_progressing(caught_up, lambda: -1 * streams.query(range_of_partition.with_stale_reads(10**9))
                     .partition_results[partition].lag, "the standby at lag 0 with every input record counted",
                     measure="minus the standby's lag", context=context)


def test_unknown_store_and_application_are_clear_errors(app):
    with pytest.raises(UnknownStoreError, match=r"no store 'nope'; its stores are \['counts', 'values'\]"):
        app.instances["iq-0"].query(StateQueryRequest.in_store("nope").with_query(KeyQuery.with_key("k01")))
    with pytest.raises(UnknownStoreError, match="no store 'nope'"):
        query_application(app.servers, app.id, StateQueryRequest.in_store("nope").with_query(KeyQuery("k01")))
    with pytest.raises(UnknownApplicationError, match="unknown application 'no-such-app'"):
        query_application(app.servers, "no-such-app", StateQueryRequest.in_store("counts").with_query(KeyQuery("k")))
    app.close()  # nobody left to answer: a timeout naming the application, after the timeout
    started = time.monotonic()
    with pytest.raises(QueryTimeoutError, match=f"no instance of application '{app.id}' answered"):
        query_application(app.servers, app.id, StateQueryRequest.in_store("counts").with_query(KeyQuery("k01")),
                          timeout_ms=2_000)
    assert 2 <= time.monotonic() - started < 30
    with pytest.raises(InstanceNotRunningError, match="is NOT_RUNNING"):
        app.instances["iq-0"].query(StateQueryRequest.in_store("counts").with_query(KeyQuery("k01")))


def test_a_query_during_a_task_move_is_answered_right_or_fails_restoring(app):
    """iq-0 leaves: its tasks move to iq-1. Every answer meanwhile is correct for its
    position, or a "restoring"/"not_owned" failure, or a timeout: never wrong data."""
    request = StateQueryRequest.in_store("counts").with_query(RangeQuery.with_no_bounds().with_limit(100))
    answers, failures, unexpected = [], Counter(), []
    stop = threading.Event()

    def ask() -> None:
        while not stop.is_set():
            try:
                answers.append(query_application(app.servers, app.id, request, timeout_ms=3_000))
            except QueryTimeoutError:
                failures["timeout"] += 1
            except Exception as exc:  # noqa: BLE001 - asserted below
                unexpected.append(exc)
                return

    asker = threading.Thread(target=ask, daemon=True)
    with app.flowing():
        asker.start()
        app.instances["iq-0"].close(timeout=60)
        survivor = app.instances["iq-1"]

        def all_on_survivor() -> bool:
            result = query_application(app.servers, app.id, request, timeout_ms=3_000)
            return all(r.is_success and r.instance_id == "iq-1" for r in result.partition_results.values())

        wait_until(all_on_survivor, 120, "every partition answered by iq-1")
        assert survivor.state in (KafkaStreamsState.RUNNING, KafkaStreamsState.REBALANCING)
        stop.set()
        asker.join(30)
    oracle = app.oracle()
    for page in answers:
        for partition, result in page.partition_results.items():
            if not result.is_success:
                failures[result.failure_reason] += 1
                assert result.failure_reason in ("restoring", "not_owned"), result.failure
                with pytest.raises(TaskNotAvailableError):
                    page.records()
                continue
            position = result.position.offset(app.topic, partition)
            for row in result.result:
                assert row["value"] == _count_below(oracle, partition, row["key"], position), (partition, row)
    assert not unexpected and answers, f"answers {len(answers)}, failures {dict(failures)}: {unexpected!r}"
