"""Publishing and reading the status topic ``<application_id>-status``.

Writer side: a :class:`StatusPublisher` per instance sends the instance's document
(:class:`~airflow_stateful_provider.streams.status.document.InstanceStatus`, built by
:func:`status_document_from_instance`) keyed by instance id, every ``status_interval_ms``
from a daemon thread and as soon as possible after :meth:`StatusPublisher.publish_now`
(the runtime calls it on state changes), and a tombstone on clean shutdown.

Reader side: :func:`read_status_documents` reads the compacted topic from its beginning
to the end offset captured at the start (manual assignment, no consumer group, so
readers leave no trace on the cluster); :func:`fetch_application_status` adds live
changelog end offsets and returns the typed snapshot. Every broker interaction is
bounded: an unreachable broker fails within ``timeout_ms`` naming the servers tried.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.durations import duration_arg_ms
from airflow_stateful_provider.streams.errors import (
    BrokerUnreachableError,
    StatusFormatError,
    StatusReadTimeoutError,
    UnknownApplicationError,
)
from airflow_stateful_provider.streams.status.document import (
    ApplicationStatus,
    DEFAULT_STALE_AFTER_MS,
    DEFAULT_STATUS_INTERVAL_MS,
    InstanceStatus,
    STATUS_FORMAT_VERSION,
    TASK_STATES,
    build_application_status,
    control_topic_name,
    status_topic_name,
)
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topics.internal_topics import InternalTopic
from airflow_stateful_provider.streams.topics.topic_manager import InternalTopicManager

__all__ = [
    "StatusPublisher",
    "RestoreRateTracker",
    "status_document_from_instance",
    "ensure_status_topic",
    "ensure_control_topic",
    "read_status_documents",
    "fetch_application_status",
    "STATUS_TOPIC_CONFIG",
    "CONTROL_TOPIC_CONFIG",
]

log = logging.getLogger(__name__)

#: Compacted: only the latest document per instance matters. Short segments so compaction
#: can run (the active segment is never compacted); tombstones kept a day so slow readers
#: still see an instance leave.
STATUS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "3600000", "delete.retention.ms": "86400000"}
#: Commands are events, not state: time retention.
CONTROL_TOPIC_CONFIG = {"cleanup.policy": "delete"}
#: Default bound for a reader's broker interactions.
DEFAULT_READ_TIMEOUT_MS = 10_000
#: Acknowledgements a publisher keeps repeating in its documents.
MAX_ACKNOWLEDGEMENTS = 50

#: ``factory(**consumer_config_overrides) -> KafkaConsumer`` (e.g. ``KafkaStreams._new_consumer``
#: or ``functools.partial(KafkaConsumer, bootstrap_servers=..., security_protocol=...)``).
ConsumerFactory = Callable[..., Any]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------------- topics


def ensure_status_topic(admin: Any, application_id: str, *, replication_factor: int = -1) -> bool:
    """Create ``<application_id>-status`` (1 partition, compacted) if missing. Returns
    whether it was created; raises StreamsError if it exists with another partition count."""
    topic = InternalTopic(status_topic_name(application_id), 1, dict(STATUS_TOPIC_CONFIG), "status", -1)
    return bool(InternalTopicManager(admin, replication_factor=replication_factor).ensure([topic]))


def ensure_control_topic(admin: Any, application_id: str, *, replication_factor: int = -1) -> bool:
    """Create ``<application_id>-control`` (1 partition, delete policy) if missing."""
    topic = InternalTopic(control_topic_name(application_id), 1, dict(CONTROL_TOPIC_CONFIG), "control", -1)
    return bool(InternalTopicManager(admin, replication_factor=replication_factor).ensure([topic]))


# ---------------------------------------------------------------------------- the document of an instance


class RestoreRateTracker:
    """Offsets per second of each changelog partition over a sliding window.

    The rate is (newest position - oldest position) / elapsed time of the samples kept
    within ``window_ms``; it is 0.0 until two samples exist. A position that moves
    backwards (store wiped and restored from the beginning) restarts the window.
    """

    def __init__(self, window_ms: int | timedelta = 30_000) -> None:
        self.window_ms = duration_arg_ms(window_ms, "window_ms", minimum=1)
        self._samples: dict[Any, collections.deque[tuple[int, int]]] = {}

    def observe(self, key: Any, position: int, now_ms: int) -> float:
        samples = self._samples.setdefault(key, collections.deque())
        if samples and (position < samples[-1][1] or now_ms < samples[-1][0]):
            samples.clear()
        samples.append((now_ms, position))
        while len(samples) > 2 and samples[1][0] <= now_ms - self.window_ms:
            samples.popleft()
        first_ms, first_pos = samples[0]
        elapsed = now_ms - first_ms
        return 0.0 if elapsed <= 0 else (position - first_pos) * 1000.0 / elapsed

    def retain(self, keys: Iterable[Any]) -> None:
        """Forget partitions no longer reported (task moved away or restored)."""
        keep = set(keys)
        for key in list(self._samples):
            if key not in keep:
                del self._samples[key]


def _task_state(obj: Any) -> str | None:
    state = getattr(obj, "state", None)
    if state is None:
        return "running"
    name = str(getattr(state, "value", state)).lower()
    if name == "closed":
        return None
    if name not in TASK_STATES:
        log.warning("task %s reports state %r, which the status document cannot express; left out",
                    getattr(obj, "id", "?"), name)
        return None
    return name


def _changelog_entry(entry: Any, task_id: str, now_ms: int, tracker: RestoreRateTracker | None,
                     observed: set) -> dict[str, Any]:
    partition = entry.partition
    topic, number = partition[0], partition[1]
    current = getattr(entry, "position", None)
    if current is None:
        current = entry.current_offset
    key = (task_id, topic, number)
    observed.add(key)
    rate = tracker.observe(key, current, now_ms) if tracker is not None else 0.0
    return {"topic": topic, "partition": number,
            "store": getattr(entry, "store_name", None) or getattr(entry, "store"),
            "start_offset": entry.start_offset, "current_offset": current,
            "end_offset": getattr(entry, "end_offset", None), "restore_rate": max(0.0, rate)}


def _generation(thread: Any) -> int | None:
    consumer = getattr(thread, "consumer", None)
    if consumer is None:
        return None
    try:
        generation = consumer.group_metadata().generation_id
    except Exception:  # noqa: BLE001 - a closing consumer: no generation to report
        return None
    return generation if isinstance(generation, int) and generation >= 0 else None


def _thread_tasks(thread: Any, now_ms: int, tracker: RestoreRateTracker | None, observed: set) -> list[dict[str, Any]]:
    """The task entries of one stream thread (call with its ``tasks_lock`` held)."""
    reader = getattr(thread, "changelog_reader", None)
    by_task: dict[str, list[Any]] = {}
    for entry in (reader.progress() if reader is not None else []):
        by_task.setdefault(str(entry.task_id), []).append(entry)
    tasks: list[dict[str, Any]] = []
    for task_id, task in sorted(thread.tasks.items(), key=lambda item: _sort_key(item[0])):
        state = _task_state(task)
        if state is None:
            continue
        key = str(task_id)
        tasks.append({"task_id": key, "role": "active", "state": state,
                      "changelogs": [_changelog_entry(e, key, now_ms, tracker, observed)
                                     for e in by_task.get(key, [])]})
    warmup_ids = {str(t) for t in (getattr(thread, "warmup_tasks", None) or ())}
    standby_map = getattr(thread, "standby_tasks", None) or {}
    for task_id, standby in sorted(standby_map.items(), key=lambda item: _sort_key(item[0])):
        state = _task_state(standby)
        if state is None:
            continue
        key = str(getattr(standby, "id", task_id))
        warmup = bool(getattr(standby, "warmup", False) or getattr(standby, "is_warmup", False)
                      or key in warmup_ids)
        own_progress = getattr(standby, "changelog_progress", None)
        entries = list(own_progress()) if callable(own_progress) else by_task.get(key, [])
        tasks.append({"task_id": key, "role": "warmup" if warmup else "standby", "state": state,
                      "changelogs": [_changelog_entry(e, key, now_ms, tracker, observed) for e in entries]})
    return tasks


def status_document_from_instance(
    streams: Any,
    instance_id: str,
    epoch: int,
    *,
    rate_tracker: RestoreRateTracker | None = None,
    now_ms: int | None = None,
    host: str | None = None,
    pid: int | None = None,
) -> dict[str, Any]:
    """The status document of a running ``KafkaStreams`` instance, read from its public
    attributes only (safe from another thread: each thread's tasks are copied under its
    ``tasks_lock``).

    Reads ``streams.state``, ``.config.application_id``, ``.process_id``, ``.threads``;
    per thread ``.tasks`` (StreamTask: ``.id``, ``.state``), ``.changelog_reader.progress()``,
    ``.consumer.group_metadata()`` (generation), and when present ``.standby_tasks``
    (TaskId -> standby with ``.id``, ``.state``, optional ``.warmup``/``.is_warmup`` and
    ``.changelog_progress()``), ``.warmup_tasks`` and ``.next_probing_rebalance_ms``.
    ``published_at`` is set to ``now_ms``; the publisher overwrites it when sending.
    """
    now = _wall_clock_ms() if now_ms is None else now_ms
    observed: set = set()
    tasks: list[dict[str, Any]] = []
    generations: list[int] = []
    probes: list[int] = []
    own_probe = getattr(streams, "next_probing_rebalance_ms", None)
    if isinstance(own_probe, int):
        probes.append(own_probe)
    for thread in list(streams.threads):
        generation = _generation(thread)
        if generation is not None:
            generations.append(generation)
        probe = getattr(thread, "next_probing_rebalance_ms", None)
        if isinstance(probe, int):
            probes.append(probe)
        # The thread changes its tasks and the reader's registrations under tasks_lock: copied
        # under it, a restoring task always comes with its changelog progress.
        with getattr(thread, "tasks_lock", None) or contextlib.nullcontext():
            tasks += _thread_tasks(thread, now, rate_tracker, observed)
    if rate_tracker is not None:
        rate_tracker.retain(observed)
    state = getattr(streams.state, "value", streams.state)
    return {
        "format_version": STATUS_FORMAT_VERSION,
        "instance_id": instance_id,
        "application_id": streams.config.application_id,
        "state": str(state),
        "epoch": epoch,
        "host": host if host is not None else socket.gethostname(),
        "pid": pid if pid is not None else os.getpid(),
        "process_id": str(streams.process_id),
        "generation": max(generations) if generations else None,
        "next_probing_rebalance_ms": min(probes) if probes else None,
        "published_at": now,
        "tasks": tasks,
        "acknowledgements": [],
    }


def _sort_key(task_id: Any) -> tuple:
    if isinstance(task_id, TaskId):
        return (task_id.subtopology, task_id.partition)
    return (10**9, str(task_id))


# ---------------------------------------------------------------------------- publisher


class StatusPublisher:
    """Publishes one instance's status document to ``<application_id>-status``.

    ``collect()`` returns the document (a dict or an InstanceStatus); the publisher stamps
    ``published_at``, adds its recorded acknowledgements, validates it with the strict
    parser (a bad document is a bug here, not a reader's surprise) and sends it keyed by
    ``instance_id``. Use :meth:`for_instance` for a ``KafkaStreams`` instance.
    """

    def __init__(
        self,
        application_id: str,
        instance_id: str,
        collect: Callable[[], Mapping[str, Any] | InstanceStatus],
        *,
        producer: Any = None,
        bootstrap_servers: str | Sequence[str] | None = None,
        client_configs: Mapping[str, Any] | None = None,
        status_interval_ms: int | timedelta = DEFAULT_STATUS_INTERVAL_MS,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        if not isinstance(instance_id, str) or not instance_id:
            raise ValueError(f"instance_id must be a non-empty string, got {instance_id!r}")
        self.application_id = application_id
        self.instance_id = instance_id
        self.topic = status_topic_name(application_id)
        self.status_interval_ms = duration_arg_ms(status_interval_ms, "status_interval_ms", minimum=1)
        self._collect = collect
        self._clock = clock
        self._owns_producer = producer is None
        if producer is None:
            if bootstrap_servers is None:
                raise ValueError("StatusPublisher needs a producer or bootstrap_servers")
            producer = _new_producer(bootstrap_servers, client_configs or {}, f"{instance_id}-status-publisher")
        self._producer = producer
        self._send_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._acknowledgements: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_ACKNOWLEDGEMENTS)
        #: Documents sent so far (for tests and metrics).
        self.published_count = 0
        self.last_document: InstanceStatus | None = None

    @classmethod
    def for_instance(cls, streams: Any, instance_id: str, epoch: int, *, producer: Any = None,
                     status_interval_ms: int | timedelta | None = None) -> StatusPublisher:
        """A publisher of ``status_document_from_instance(streams, ...)`` with its own rate
        tracker, using the instance's bootstrap servers and client/producer configs."""
        config = streams.config
        tracker = RestoreRateTracker()
        interval = status_interval_ms if status_interval_ms is not None else \
            getattr(config, "status_interval_ms", DEFAULT_STATUS_INTERVAL_MS)
        return cls(config.application_id, instance_id,
                   lambda: status_document_from_instance(streams, instance_id, epoch, rate_tracker=tracker),
                   producer=producer, bootstrap_servers=list(config.bootstrap_servers),
                   client_configs={**config.client_configs, **config.producer_configs},
                   status_interval_ms=interval)

    # ------------------------------------------------------------------ publishing

    def start(self) -> StatusPublisher:
        """Start the daemon thread: publishes at once, then every ``status_interval_ms``
        and whenever :meth:`publish_now` asks."""
        if self._closed:
            raise RuntimeError(f"status publisher of {self.instance_id!r} is closed")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"{self.instance_id}-status-publisher",
                                            daemon=True)
            self._thread.start()
        return self

    def publish_now(self) -> None:
        """Ask the publisher thread to publish as soon as possible. Never blocks, so it is
        safe in state listeners and Kafka callbacks; bursts coalesce into one document."""
        self._wake.set()

    def publish(self) -> InstanceStatus:
        """Collect and send a document in the calling thread (no flush); returns it."""
        with self._send_lock:
            if self._closed:
                raise RuntimeError(f"status publisher of {self.instance_id!r} is closed")
            return self._send_document()

    def acknowledge(self, command_id: str, status: str, result: Any = None, *, publish: bool = True) -> None:
        """Record an acknowledgement of a control command; it is repeated in every document
        (the last MAX_ACKNOWLEDGEMENTS are kept)."""
        self._acknowledgements.append({"command_id": command_id, "status": status, "result": result,
                                       "at": self._clock()})
        if publish:
            self.publish_now()

    def flush(self, timeout: float | None = 10.0) -> None:
        self._producer.flush(timeout=timeout)

    def _send_document(self) -> InstanceStatus:
        raw = self._collect()
        document = raw.to_dict() if isinstance(raw, InstanceStatus) else dict(raw)
        document["published_at"] = self._clock()
        if self._acknowledgements:
            document["acknowledgements"] = list(document.get("acknowledgements") or []) + list(self._acknowledgements)
        status = InstanceStatus.from_dict(document, key=self.instance_id)
        if status.application_id != self.application_id:
            raise StatusFormatError(f"status document of instance {self.instance_id!r}: field 'application_id' is "
                                    f"{status.application_id!r} but the publisher writes for {self.application_id!r}")
        future = self._producer.send(self.topic, key=self.instance_id.encode("utf-8"), value=status.to_json_bytes())
        future.add_errback(lambda exc: log.warning("status of %s not delivered to %s: %r",
                                                   self.instance_id, self.topic, exc))
        self.published_count += 1
        self.last_document = status
        return status

    def _run(self) -> None:
        next_due = time.monotonic()
        while not self._stopping.is_set():
            self._wake.wait(max(0.0, next_due - time.monotonic()))
            if self._stopping.is_set():
                break
            self._wake.clear()
            try:
                with self._send_lock:
                    if self._closed:
                        break
                    self._send_document()
            except Exception:  # noqa: BLE001 - status must never take the instance down
                log.exception("status publisher of %s failed to publish; retrying in %d ms",
                              self.instance_id, self.status_interval_ms)
            next_due = time.monotonic() + self.status_interval_ms / 1000

    # ------------------------------------------------------------------ close

    def close(self, clean: bool = True, timeout: float = 10.0) -> None:
        """Stop publishing. Clean: send a tombstone (the instance left on purpose, readers
        forget it). Not clean: send one last document (e.g. state ERROR), best effort."""
        if self._closed:
            return
        self._stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with self._send_lock:
            self._closed = True
            try:
                if clean:
                    self._producer.send(self.topic, key=self.instance_id.encode("utf-8"), value=None)
                else:
                    self._send_document()
                self._producer.flush(timeout=timeout)
            except Exception:  # noqa: BLE001 - closing anyway; readers will see the document go stale
                log.exception("status publisher of %s: final %s not delivered", self.instance_id,
                              "tombstone" if clean else "document")
            finally:
                if self._owns_producer:
                    try:
                        self._producer.close(timeout=timeout)
                    except Exception:  # noqa: BLE001
                        log.exception("status publisher of %s: error closing its producer", self.instance_id)

    def __enter__(self) -> StatusPublisher:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(clean=exc_type is None)


def _servers_text(servers: str | Sequence[str]) -> str:
    return servers if isinstance(servers, str) else ",".join(servers)


def _connection_errors() -> tuple[type[BaseException], ...]:
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError

    return (KafkaConnectionError, KafkaTimeoutError)


def _construct(client_class: Any, configs: Mapping[str, Any]) -> Any:
    """``client_class(**configs)``, closing the network client if the constructor fails:
    kafka-python 3 starts its IO thread before bootstrapping and leaves it running when
    the bootstrap times out, so every failed attempt (a sensor poking, ``--watch``)
    would leak a thread. ``kafka_client`` is the documented hook for the client factory."""
    from kafka.net.compat import KafkaNetClient

    factory = configs.get("kafka_client", KafkaNetClient)
    created: list[Any] = []

    def tracked(*args: Any, **kwargs: Any) -> Any:
        created.append(factory(*args, **kwargs))
        return created[-1]

    try:
        return client_class(**{**configs, "kafka_client": tracked})
    except BaseException:
        for client in created:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - already failing; the original error matters
                log.debug("closing the network client of a failed %s", client_class.__name__, exc_info=True)
        raise


def _new_producer(bootstrap_servers: str | Sequence[str], client_configs: Mapping[str, Any], client_id: str) -> Any:
    from kafka import KafkaProducer

    # No auto-creation: a status topic created by the broker would have the delete policy;
    # ensure_status_topic() creates it compacted.
    configs = {"bootstrap_servers": bootstrap_servers, "client_id": client_id, "acks": "all", "linger_ms": 0,
               "max_block_ms": 10_000, "bootstrap_timeout_ms": 10_000, **client_configs,
               "allow_auto_create_topics": False}
    try:
        return _construct(KafkaProducer, configs)
    except _connection_errors() as exc:
        raise BrokerUnreachableError(f"cannot reach Kafka at {_servers_text(bootstrap_servers)} to publish status: "
                                     f"{exc}") from exc


# ---------------------------------------------------------------------------- reader


def _open_consumer(source: str | Sequence[str] | ConsumerFactory, application_id: str, timeout_ms: int,
                   client_configs: Mapping[str, Any] | None) -> tuple[Any, str]:
    """A group-less consumer for reading; returns it and the servers text for errors."""
    overrides = {"group_id": None, "enable_auto_commit": False, "auto_offset_reset": "earliest",
                 "allow_auto_create_topics": False, "client_id": f"{application_id}-status-reader",
                 "bootstrap_timeout_ms": timeout_ms, "request_timeout_ms": max(timeout_ms, 1_000),
                 "fetch_max_wait_ms": 100}
    if callable(source):
        factory = source
        servers = str(getattr(source, "bootstrap_servers", None) or "the brokers of the consumer factory")
    else:
        from kafka import KafkaConsumer

        servers = _servers_text(source)

        def factory(**extra: Any) -> Any:
            return _construct(KafkaConsumer, {"bootstrap_servers": source, **extra, **(client_configs or {})})
    try:
        return factory(**overrides), servers
    except _connection_errors() as exc:
        raise BrokerUnreachableError(f"cannot reach Kafka at {servers} within {timeout_ms} ms "
                                     f"(reading the status of application {application_id!r}): {exc}") from exc


def read_status_documents(
    source: str | Sequence[str] | ConsumerFactory,
    application_id: str,
    timeout_ms: int | timedelta = DEFAULT_READ_TIMEOUT_MS,
    *,
    client_configs: Mapping[str, Any] | None = None,
    allow_empty: bool = False,
) -> dict[str, InstanceStatus]:
    """The latest document of every instance, by instance id.

    ``source``: bootstrap servers, or a consumer factory (called with keyword overrides,
    returns a KafkaConsumer). Reads from the beginning to the end offset captured at the
    start; the last record per key wins and tombstones remove. Raises
    UnknownApplicationError when the topic is missing or holds no live document (unless
    ``allow_empty``), BrokerUnreachableError / StatusReadTimeoutError past ``timeout_ms``,
    StatusFormatError for a malformed document.
    """
    timeout = duration_arg_ms(timeout_ms, "timeout_ms", minimum=1)
    consumer, servers = _open_consumer(source, application_id, timeout, client_configs)
    try:
        return _read_documents(consumer, servers, application_id, timeout, allow_empty)
    finally:
        consumer.close()


def _read_documents(consumer: Any, servers: str, application_id: str, timeout_ms: int,
                    allow_empty: bool) -> dict[str, InstanceStatus]:
    from kafka import TopicPartition as KafkaTopicPartition

    topic = status_topic_name(application_id)
    deadline = time.monotonic() + timeout_ms / 1000
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise UnknownApplicationError(
                f"unknown application {application_id!r}: no status topic {topic!r} on {servers} (never started, "
                f"or another cluster)")
        tps = [KafkaTopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        begins = consumer.beginning_offsets(tps, timeout_ms=timeout_ms)
        ends = consumer.end_offsets(tps, timeout_ms=timeout_ms)
        pending = {tp for tp in tps if ends[tp] > begins[tp]}
        for tp in tps:
            consumer.seek(tp, begins[tp])
        latest: dict[str, bytes | None] = {}
        while pending:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise StatusReadTimeoutError(
                    f"reading {topic!r} on {servers}: end offsets {[ends[tp] for tp in sorted(pending)]} not reached "
                    f"within {timeout_ms} ms (at {[consumer.position(tp) for tp in sorted(pending)]})")
            for tp, records in consumer.poll(timeout_ms=min(left_ms, 200), max_records=5_000).items():
                for record in records:
                    if record.offset >= ends[tp]:
                        continue
                    if record.key is None:
                        log.warning("%s offset %d: status record without a key ignored", topic, record.offset)
                        continue
                    try:
                        key = record.key.decode("utf-8")
                    except UnicodeDecodeError:
                        raise StatusFormatError(f"{topic} offset {record.offset}: record key {record.key!r} is not "
                                                f"UTF-8 (expected an instance id)") from None
                    latest[key] = record.value
            for tp in list(pending):
                if consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
    except _connection_errors() as exc:
        raise BrokerUnreachableError(f"lost Kafka at {servers} while reading {topic!r}: {exc}") from exc
    documents: dict[str, InstanceStatus] = {}
    for key, value in sorted(latest.items()):
        if value is None:
            continue
        document = InstanceStatus.from_json_bytes(value, key=key)
        if document.application_id != application_id:
            raise StatusFormatError(f"status document of instance {key!r} in {topic!r}: field 'application_id' is "
                                    f"{document.application_id!r}, expected {application_id!r}")
        documents[key] = document
    if not documents and not allow_empty:
        why = ("the topic is empty (no instance has published yet)" if not latest else
               "every instance removed its document (all shut down cleanly)")
        raise UnknownApplicationError(f"application {application_id!r} has no live status documents in {topic!r} "
                                      f"on {servers}: {why}")
    return documents


def _live_end_offsets(consumer: Any, partitions: Iterable[tuple[str, int]],
                      timeout_ms: int) -> dict[tuple[str, int], int]:
    """End offsets of the changelog partitions that exist; missing ones are left out (the
    snapshot then falls back to reported ends and says so)."""
    from kafka import TopicPartition as KafkaTopicPartition

    wanted: list[Any] = []
    for topic in sorted({t for t, _ in partitions}):
        present = consumer.partitions_for_topic(topic) or set()
        wanted += [KafkaTopicPartition(t, p) for t, p in sorted(partitions) if t == topic and p in present]
    if not wanted:
        return {}
    try:
        ends = consumer.end_offsets(wanted, timeout_ms=timeout_ms)
    except _connection_errors() as exc:
        log.warning("live end offsets of %d changelog partitions unavailable (%r); standby lags use reported ends",
                    len(wanted), exc)
        return {}
    return {(tp.topic, tp.partition): offset for tp, offset in ends.items()}


def fetch_application_status(
    bootstrap_servers: str | Sequence[str] | ConsumerFactory,
    application_id: str,
    *,
    stale_after_ms: int | timedelta = DEFAULT_STALE_AFTER_MS,
    client_configs: Mapping[str, Any] | None = None,
    timeout_ms: int | timedelta = DEFAULT_READ_TIMEOUT_MS,
    expected_tasks: Iterable[str | TaskId] = (),
    now_ms: int | None = None,
) -> ApplicationStatus:
    """Read every instance's document and the live end offsets of the changelog
    partitions they mention, and build the snapshot (see ``build_application_status``).
    Raises UnknownApplicationError when there is no live document."""
    timeout = duration_arg_ms(timeout_ms, "timeout_ms", minimum=1)
    consumer, servers = _open_consumer(bootstrap_servers, application_id, timeout, client_configs)
    try:
        documents = _read_documents(consumer, servers, application_id, timeout, allow_empty=False)
        partitions = {c.topic_partition for d in documents.values() for t in d.tasks for c in t.changelogs}
        try:
            ends = _live_end_offsets(consumer, partitions, timeout)
        except _connection_errors() as exc:
            raise BrokerUnreachableError(f"lost Kafka at {servers} while fetching changelog end offsets: "
                                         f"{exc}") from exc
    finally:
        consumer.close()
    return build_application_status(documents, ends, _wall_clock_ms() if now_ms is None else now_ms, stale_after_ms,
                                     application_id=application_id, expected_tasks=expected_tasks)
