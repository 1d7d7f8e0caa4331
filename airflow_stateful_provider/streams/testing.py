"""TopologyTestDriver: run a topology deterministically, without a broker.

Use it to unit-test your own topologies::

    driver = TopologyTestDriver(topology)
    clicks = driver.create_input_topic("clicks", Serdes.string(), Serdes.string())
    counts = driver.create_output_topic("counts", SessionWindowedSerde(Serdes.string()), Serdes.int64())
    clicks.pipe_input("alice", "home", timestamp=0)
    assert counts.read_key_value() == KeyValue(Windowed("alice", SessionWindow(0, 0)), 1)
    driver.close()

It builds the same :class:`~airflow_stateful_provider.streams.processing.task.StreamTask`
objects as the real runtime (one per subtopology, partition 0) and feeds them
through an in-memory producer. Every piped record is processed to completion
(including hops through repartition topics) before ``pipe_input`` returns; stream
time punctuations are checked after each record; wall-clock time only moves when
you call :meth:`TopologyTestDriver.advance_wall_clock_time`.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import tempfile
from collections import deque
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import StreamsError
from airflow_stateful_provider.streams.processing.in_memory_producer import InMemoryProducer, Produced
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.records import ConsumedRecord
from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
from airflow_stateful_provider.streams.processing.task import StreamTask
from airflow_stateful_provider.streams.processor import Headers, KeyValue, _as_headers
from airflow_stateful_provider.streams.serdes import resolve_serde
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.rocksdb_memory import RocksDBMemory
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = [
    "EmptyTopicError",
    "KeyValue",
    "TestInputTopic",
    "TestOutputTopic",
    "TestRecord",
    "TopologyTestDriver",
]

#: Defaults used when no config (or no application id / servers) is given, as in Kafka.
DEFAULT_APPLICATION_ID = "topology-test-driver"
DEFAULT_BOOTSTRAP_SERVERS = "dummy-bootstrap:9092"


class EmptyTopicError(StreamsError, LookupError):
    """Read from an output topic that holds no (more) records."""


@dataclasses.dataclass(frozen=True)
class TestRecord:
    """A record as piped in or read out: key, value, timestamp (ms) and headers."""

    __test__ = False  # not a pytest test class

    key: Any
    value: Any
    timestamp: int | None = None
    headers: Headers = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", _as_headers(self.headers))


class TopologyTestDriver:
    """Drives a topology deterministically, without a broker (see module docstring).

    ``config``: a StreamsConfig, a mapping of its fields, or None (application id
    ``topology-test-driver``). ``initial_wall_clock_time``: ms, timedelta since the epoch,
    or an aware datetime (default 0, so wall-clock punctuations are reproducible).
    ``store_type``: ``"in_memory"`` (default) or ``"rocksdb"`` forces every store to that
    implementation (RocksDB stores live in a temporary state directory removed by
    :meth:`close`); None keeps what each store builder says. ``changelogs``: store name ->
    changelog records (e.g. another driver's :meth:`changelog_records`) restored into the
    store before any record is processed, as a task restores on a wiped disk; they stay at
    the head of this driver's changelog.
    """

    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig | Mapping[str, Any] | None = None,
        *,
        initial_wall_clock_time: int | timedelta | datetime = 0,
        store_type: str | None = "in_memory",
        changelogs: Mapping[str, Iterable[ChangelogRecord]] | None = None,
    ) -> None:
        if not isinstance(topology, Topology):
            build = getattr(topology, "build", None)
            raise TypeError(
                f"TopologyTestDriver needs a Topology, got {type(topology).__name__}"
                + (" (did you forget StreamsBuilder.build()?)" if build is not None else "")
            )
        if store_type not in (None, "in_memory", "rocksdb"):
            raise ValueError(f"store_type must be 'in_memory', 'rocksdb' or None, got {store_type!r}")
        self._temp_dir = tempfile.mkdtemp(prefix="topology-test-driver-")
        try:
            self.config = self._make_config(config)
            self._wall_clock = _to_epoch_ms(initial_wall_clock_time)
            self._topology = topology
            self._producer = InMemoryProducer()
            self._outputs: dict[str, deque[Produced]] = {}
            #: every record written to a changelog topic, in order (changelog_records)
            self._changelogs: dict[str, list[ChangelogRecord]] = {}
            self._input_offsets: dict[str, itertools.count] = {}
            self._tasks: list[StreamTask] = []
            self._task_by_topic: dict[str, StreamTask] = {}
            self._changelog_topics: set[str] = set()
            self._closed = False
            app = self.config.application_id
            rocksdb_memory = RocksDBMemory.for_config(self.config)  # the driver is one instance
            self._internal_sources = {
                topology.decorate_topic(t, app) for t in topology.internal_topics if topology.source_node_for_topic(t)
            }
            for sub in topology.subtopologies():
                task_id = TaskId(sub.id, 0)
                collector = RecordCollector(self._producer, task_id=task_id)
                stores = TaskStateManager(
                    task_id,
                    topology,
                    self.config,
                    record_collector=collector,
                    store_type=store_type,
                    rocksdb_memory=rocksdb_memory,
                )
                task = StreamTask(
                    task_id,
                    topology,
                    self.config,
                    record_collector=collector,
                    stores=stores,
                    wall_clock=self._now,
                )
                self._tasks.append(task)
                for tp in task.partitions:
                    self._task_by_topic[tp.topic] = task
            for task in self._tasks:
                task.initialize()
                self._restore(task, changelogs or {})
                task.complete_restoration()
            self._capture()
            self._process_all()
        except BaseException:
            self._cleanup_after_failed_init()
            raise

    # ------------------------------------------------------------------ topics

    def create_input_topic(
        self,
        topic: str,
        key_serde: Any = None,
        value_serde: Any = None,
        *,
        start_timestamp: int | timedelta | datetime = 0,
        auto_advance: int | timedelta = 0,
    ) -> TestInputTopic:
        """A handle to pipe records into ``topic`` (serdes: objects or built-in names;
        None = the config's defaults). Records piped without a timestamp get the topic's
        current time, which then moves by ``auto_advance``."""
        self._check_open()
        if topic not in self._task_by_topic:
            raise StreamsError(
                f"unknown input topic {topic!r}: the topology reads {sorted(self._task_by_topic)}"
            )
        return TestInputTopic(
            self,
            topic,
            resolve_serde(key_serde, self.config.default_key_serde, f"key serde of input topic {topic!r}"),
            resolve_serde(value_serde, self.config.default_value_serde, f"value serde of input topic {topic!r}"),
            _to_epoch_ms(start_timestamp),
            duration_ms(auto_advance, "auto_advance", minimum=0),
        )

    def create_output_topic(self, topic: str, key_serde: Any = None, value_serde: Any = None) -> TestOutputTopic:
        """A handle to read what the topology wrote to ``topic`` (in write order)."""
        self._check_open()
        return TestOutputTopic(
            self,
            topic,
            resolve_serde(key_serde, self.config.default_key_serde, f"key serde of output topic {topic!r}"),
            resolve_serde(value_serde, self.config.default_value_serde, f"value serde of output topic {topic!r}"),
        )

    def produced_topic_names(self) -> set[str]:
        """Every topic something was written to (sinks, changelogs, repartition topics)."""
        return set(self._outputs)

    # ------------------------------------------------------------------ time

    def advance_wall_clock_time(self, advance: int | timedelta) -> None:
        """Move the mocked wall clock forward and fire due WALL_CLOCK_TIME punctuations."""
        self._check_open()
        self._wall_clock += duration_ms(advance, "advance", minimum=0)
        for task in self._tasks:
            task.maybe_punctuate_system_time()
            self._commit(task)
            self._capture()
        self._process_all()

    @property
    def wall_clock_time_ms(self) -> int:
        return self._wall_clock

    # ------------------------------------------------------------------ stores

    def get_all_state_stores(self) -> dict[str, Any]:
        """Every store by name (the typed stores processors see)."""
        self._check_open()
        return {name: task.get_store(name) for task in self._tasks for name in task.subtopology.store_names}

    def get_state_store(self, name: str) -> Any:
        """The store called ``name`` as processors see it."""
        self._check_open()
        for task in self._tasks:
            if name in task.subtopology.store_names:
                return task.get_store(name)
        raise StreamsError(f"no state store named {name!r}; stores: {sorted(self._store_names())}")

    def get_key_value_store(self, name: str) -> Any:
        return self._typed_store(name, "key_value")

    def get_session_store(self, name: str) -> Any:
        return self._typed_store(name, "session")

    def get_versioned_key_value_store(self, name: str) -> Any:
        return self._typed_store(name, "versioned")

    def changelog_records(self, name: str) -> list[ChangelogRecord]:
        """Every record written to the changelog of store ``name`` (restored ones first),
        with offsets from 0: what a restore reads (pass them as ``changelogs``)."""
        self._check_open()
        stores, _ = self._task_of_store(name)
        changelog = stores.changelog_partitions().get(name)
        if changelog is None:
            raise StreamsError(f"state store {name!r} has no changelog (logging disabled)")
        return list(self._changelogs.get(changelog.topic, ()))

    def enforce_retention(self, now: int | timedelta | datetime, stores: Iterable[str] | None = None) -> list[dict]:
        """Run the ``enforce_retention`` maintenance command as of ``now`` on the session and
        versioned stores (``stores``: names; None = all), as a running instance applies it
        (docs/maintenance.md): write record caches through, drop what is expired, write the
        cut-off marker into each store's changelog, commit. Returns each store's result."""
        self._check_open()
        now_ms = _to_epoch_ms(now)
        wanted = None if stores is None else set(stores)
        rows = []
        for task in self._tasks:
            manager, _ = self._task_of_store_manager(task)
            entries = [e for e in manager.entries() if (e.kind.maintainable or e.retention is not None)
                       and (wanted is None or e.name in wanted)]
            if not entries:
                continue
            manager.flush()
            self._capture()
            for entry in entries:
                rows.append({"store": entry.name,
                             "result": manager.enforce_retention(entry.name, now_ms, write_cutoff=True)})
            task.prepare_commit()
            task.post_commit(enforce_checkpoint=True)
            self._capture()
        self._process_all()
        return rows

    # ------------------------------------------------------------------ introspection

    @property
    def tasks(self) -> list[StreamTask]:
        """The driver's tasks (one per subtopology), for advanced assertions."""
        return list(self._tasks)

    def metrics(self) -> dict[str, int]:
        """Task counters summed over tasks: ``process-total``, ``dropped-records-total``,
        ``dropped-records-total:<reason>`` (late, null-key, deserialization, ...)."""
        total: dict[str, int] = {}
        for task in self._tasks:
            for key, value in task.metrics.as_dict().items():
                total[key] = total.get(key, 0) + value
        return total

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close processors and stores (committing first) and delete the temporary state."""
        if self._closed:
            return
        self._closed = True
        try:
            first_error: BaseException | None = None
            for task in self._tasks:
                try:
                    task.prepare_commit()
                    task.post_commit(enforce_checkpoint=True)
                    task.close(clean=True)
                except Exception as exc:  # noqa: BLE001 - close all tasks, re-raise the first error
                    task.close(clean=False)
                    first_error = first_error or exc
            if first_error is not None:
                raise first_error
        finally:
            shutil.rmtree(self._temp_dir, ignore_errors=True)

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _make_config(self, config: StreamsConfig | Mapping[str, Any] | None) -> StreamsConfig:
        if isinstance(config, StreamsConfig):
            values = config.to_dict()
        else:
            values = dict(config or {})
            values.setdefault("application_id", DEFAULT_APPLICATION_ID)
            values.setdefault("bootstrap_servers", DEFAULT_BOOTSTRAP_SERVERS)
        values["state_dir"] = self._temp_dir
        return StreamsConfig.from_mapping(values)

    def _now(self) -> int:
        return self._wall_clock

    def _check_open(self) -> None:
        if self._closed:
            raise StreamsError("TopologyTestDriver is closed")

    def _pipe(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers) -> None:
        self._check_open()
        task = self._task_by_topic.get(topic)
        if task is None:
            raise StreamsError(f"unknown input topic {topic!r}: the topology reads {sorted(self._task_by_topic)}")
        self._enqueue(task, topic, key, value, timestamp, headers)
        self._process_all()

    def _enqueue(
        self, task: StreamTask, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers
    ) -> None:
        offset = next(self._input_offsets.setdefault(topic, itertools.count()))
        task.add_records(TopicPartition(topic, 0), [ConsumedRecord(topic, 0, offset, timestamp, key, value, headers)])
        self._capture()  # a poison record may have produced a dead letter

    def _process_all(self) -> None:
        progressed = True
        while progressed:
            progressed = False
            for task in self._tasks:
                while task.has_records_queued():
                    task.process(self._wall_clock)
                    task.maybe_punctuate_stream_time()
                    self._commit(task)
                    self._capture()
                    progressed = True

    def _commit(self, task: StreamTask) -> None:
        if task.commit_needed or task.commit_requested:
            task.prepare_commit()
            task.post_commit()

    def _capture(self) -> None:
        pending = self._producer.pending
        while pending:
            produced = pending.popleft()
            self._outputs.setdefault(produced.topic, deque()).append(produced)
            if produced.topic in self._changelog_topics:
                log = self._changelogs.setdefault(produced.topic, [])
                log.append(ChangelogRecord(produced.key, produced.value, produced.timestamp, len(log)))
            if produced.topic in self._internal_sources:
                self._enqueue(
                    self._task_by_topic[produced.topic],
                    produced.topic,
                    produced.key,
                    produced.value,
                    produced.timestamp,
                    produced.headers,
                )

    def _restore(self, task: StreamTask, changelogs: Mapping[str, Iterable[ChangelogRecord]]) -> None:
        manager: TaskStateManager = task.stores  # type: ignore[assignment]  # the driver builds them
        for name, changelog in manager.changelog_partitions().items():
            self._changelog_topics.add(changelog.topic)
            if name not in changelogs:
                continue
            records = [ChangelogRecord(r.key, r.value, r.timestamp, offset)
                       for offset, r in enumerate(changelogs[name])]
            self._changelogs[changelog.topic] = list(records)
            if records:
                manager.restore(changelog, records)

    @staticmethod
    def _task_of_store_manager(task: StreamTask) -> tuple[TaskStateManager, StreamTask]:
        return task.stores, task  # type: ignore[return-value]  # the driver builds TaskStateManagers

    def _task_of_store(self, name: str) -> tuple[TaskStateManager, StreamTask]:
        for task in self._tasks:
            if name in task.subtopology.store_names:
                return task.stores, task  # type: ignore[return-value]  # the driver builds TaskStateManagers
        raise StreamsError(f"no state store named {name!r}; stores: {sorted(self._store_names())}")

    def _read(self, topic: str) -> Produced:
        self._check_open()
        queue = self._outputs.get(topic)
        if not queue:
            raise EmptyTopicError(f"output topic {topic!r} is empty")
        return queue.popleft()

    def _queue_size(self, topic: str) -> int:
        return len(self._outputs.get(topic, ()))

    def _store_names(self) -> list[str]:
        return [n for task in self._tasks for n in task.subtopology.store_names]

    def _typed_store(self, name: str, kind: str) -> Any:
        store = self.get_state_store(name)
        actual = self._store_kind(name)
        if actual != kind:
            raise StreamsError(f"state store {name!r} is a {actual} store, not a {kind} store")
        return store

    def _store_kind(self, name: str) -> str:
        for task in self._tasks:
            if name in task.subtopology.store_names:
                return task.stores.kind(name)  # type: ignore[attr-defined]  # the driver's tasks have TaskStateManagers
        raise StreamsError(f"no state store named {name!r}")

    def _cleanup_after_failed_init(self) -> None:
        for task in getattr(self, "_tasks", []):
            task.close(clean=False)
        shutil.rmtree(self._temp_dir, ignore_errors=True)


class TestInputTopic:
    """Pipes typed records into one input topic of a :class:`TopologyTestDriver`."""

    __test__ = False

    def __init__(self, driver: TopologyTestDriver, topic: str, key_serde: Any, value_serde: Any,
                 start_timestamp: int, auto_advance: int) -> None:
        self._driver = driver
        self.topic = topic
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._current_time = start_timestamp
        self._auto_advance = auto_advance

    def pipe_input(
        self,
        key: Any = None,
        value: Any = None,
        timestamp: int | timedelta | datetime | None = None,
        headers: Any = (),
    ) -> None:
        """Pipe one record (and process it to completion). Without ``timestamp`` the topic's
        current time is used and then advanced by ``auto_advance``."""
        if timestamp is None:
            ts = self._current_time
            self._current_time += self._auto_advance
        else:
            ts = _to_epoch_ms(timestamp)
        key_bytes = None if key is None else self._key_serde.serialize(key)
        value_bytes = None if value is None else self._value_serde.serialize(value)
        self._driver._pipe(self.topic, key_bytes, value_bytes, ts, _as_headers(headers))

    def pipe_record(self, record: TestRecord) -> None:
        self.pipe_input(record.key, record.value, record.timestamp, record.headers)

    def pipe_record_list(self, records: Iterable[TestRecord | tuple]) -> None:
        """Pipe TestRecords or (key, value[, timestamp[, headers]]) tuples in order."""
        for record in records:
            if isinstance(record, TestRecord):
                self.pipe_record(record)
            else:
                self.pipe_input(*record)

    def pipe_key_value_list(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        for key, value in pairs:
            self.pipe_input(key, value)

    def pipe_value_list(self, values: Iterable[Any]) -> None:
        for value in values:
            self.pipe_input(None, value)

    def advance_time(self, advance: int | timedelta) -> None:
        """Move this topic's current time (used for records piped without a timestamp)."""
        self._current_time += duration_ms(advance, "advance", minimum=0)

    def __repr__(self) -> str:
        return f"TestInputTopic({self.topic!r})"


class TestOutputTopic:
    """Reads typed records a :class:`TopologyTestDriver` wrote to one topic; reading
    consumes them."""

    __test__ = False

    def __init__(self, driver: TopologyTestDriver, topic: str, key_serde: Any, value_serde: Any) -> None:
        self._driver = driver
        self.topic = topic
        self._key_serde = key_serde
        self._value_serde = value_serde

    def read_record(self) -> TestRecord:
        produced = self._driver._read(self.topic)
        return TestRecord(
            None if produced.key is None else self._key_serde.deserialize(produced.key),
            None if produced.value is None else self._value_serde.deserialize(produced.value),
            produced.timestamp,
            produced.headers,
        )

    def read_key_value(self) -> KeyValue:
        record = self.read_record()
        return KeyValue(record.key, record.value)

    def read_value(self) -> Any:
        return self.read_record().value

    def read_records_to_list(self) -> list[TestRecord]:
        out = []
        while not self.is_empty():
            out.append(self.read_record())
        return out

    def read_key_values_to_list(self) -> list[KeyValue]:
        return [KeyValue(r.key, r.value) for r in self.read_records_to_list()]

    def read_values_to_list(self) -> list[Any]:
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """Last value per key; a None value (tombstone) removes the key."""
        out: dict[Any, Any] = {}
        for key, value in self.read_key_values_to_list():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    def get_queue_size(self) -> int:
        return self._driver._queue_size(self.topic)

    def is_empty(self) -> bool:
        return self.get_queue_size() == 0

    def __repr__(self) -> str:
        return f"TestOutputTopic({self.topic!r}, queued={self.get_queue_size()})"


def _to_epoch_ms(value: int | timedelta | datetime) -> int:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"datetime timestamps must be timezone-aware, got {value!r}")
        delta = value - datetime(1970, 1, 1, tzinfo=UTC)
        return duration_ms(delta, "timestamp", minimum=0)
    return duration_ms(value, "timestamp", minimum=0)
