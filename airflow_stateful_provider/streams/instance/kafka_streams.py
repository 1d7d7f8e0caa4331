"""KafkaStreams: one instance of a streams application.

``start()`` refuses a state directory holding another application's state
(processing/task_directories.py), checks the topology against the brokers (source topics
exist and are co-partitioned), creates the internal topics (docs/semantics.md §7), records
its topology in ``<application_id>-topology`` (docs/redeploying.md) and starts
``num_stream_threads`` stream threads, each a member of the consumer group
``<application_id>``. ``close()`` stops them cleanly: commit, checkpoint, leave the group.
Before starting it refuses to run when the status topic shows a newer epoch for its
instance id (``FencedInstanceError``); while running it publishes its status document and
applies the commands of the control topic (docs/control-topic.md).

Instance states (as in Kafka Streams)::

    CREATED -> REBALANCING <-> RUNNING -> PENDING_SHUTDOWN -> NOT_RUNNING
    any running state -> PENDING_ERROR -> ERROR   (a stream thread died)

RUNNING means every thread runs with all of its tasks restored; REBALANCING covers
group rebalances and restoration.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, cast

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.control.commands import ControlCommand
from airflow_stateful_provider.streams.control.listener import ControlListener, control_read_refused
from airflow_stateful_provider.streams.errors import (
    FencedInstanceError,
    IllegalStateError,
    InstanceNotRunningError,
    MissingTopicError,
    UnknownApplicationError,
)
from airflow_stateful_provider.streams.instance.garbage_collection import raise_gc_thresholds
from airflow_stateful_provider.streams.instance.preflight import (
    check_existing_changelogs,
    check_replication_factor,
    check_snapshot_storage,
    check_topic_names,
    dead_letter_topics,
    open_admin,
    prepare_state_dir,
)
from airflow_stateful_provider.streams.instance.stream_thread import StreamThread, StreamThreadState
from airflow_stateful_provider.streams.instance.thread_stop import join_threads, thread_location
from airflow_stateful_provider.streams.kafka.client_settings import ADMIN, CONSUMER, PRODUCER, settings_for
from airflow_stateful_provider.streams.kafka.clients import prepare_consumer
from airflow_stateful_provider.streams.kafka.net_client import engine_net_client
from airflow_stateful_provider.streams.kafka.producer_close import close_producer
from airflow_stateful_provider.streams.kafka.response_classes import install_response_classes_kept
from airflow_stateful_provider.streams.processing.streams_producer import EOS_TRANSACTION_TIMEOUT_MS
from airflow_stateful_provider.streams.processing.task_directories import check_state_directory
from airflow_stateful_provider.streams.queries.local import key_metadata, query_threads, resolve_target
from airflow_stateful_provider.streams.queries.requests import StateQueryRequest
from airflow_stateful_provider.streams.queries.responder import QueryResponder, ensure_query_topics
from airflow_stateful_provider.streams.queries.results import KeyQueryMetadata, StateQueryResult
from airflow_stateful_provider.streams.redeploy.recorded_topology import describe_topology
from airflow_stateful_provider.streams.redeploy.topology_topic import topology_topic, write_recorded_topology
from airflow_stateful_provider.streams.restoration.changelog_reader import (
    StandbyUpdateListener,
    StateRestoreListener,
)
from airflow_stateful_provider.streams.state.common.rocksdb_memory import RocksDBMemory
from airflow_stateful_provider.streams.status.document import InstanceStatus, control_topic_name, status_topic_name
from airflow_stateful_provider.streams.status.metrics_endpoint import InstanceMetricsEndpoint
from airflow_stateful_provider.streams.status.publisher import (
    StatusPublisher,
    ensure_control_topic,
    ensure_status_topic,
)
from airflow_stateful_provider.streams.status.reader import read_status_documents
from airflow_stateful_provider.streams.topics.internal_topics import InternalTopic, internal_topics
from airflow_stateful_provider.streams.topics.topic_manager import (
    InternalTopicManager,
    authorized_operations,
    fetch_partition_counts,
)
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["KafkaStreams", "KafkaStreamsState"]

log = logging.getLogger(__name__)


class KafkaStreamsState(enum.Enum):
    CREATED = "CREATED"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    PENDING_ERROR = "PENDING_ERROR"
    ERROR = "ERROR"


_TRANSITIONS = {
    KafkaStreamsState.CREATED: {KafkaStreamsState.REBALANCING, KafkaStreamsState.PENDING_SHUTDOWN,
                                KafkaStreamsState.PENDING_ERROR},
    KafkaStreamsState.REBALANCING: {KafkaStreamsState.RUNNING, KafkaStreamsState.PENDING_SHUTDOWN,
                                    KafkaStreamsState.PENDING_ERROR},
    KafkaStreamsState.RUNNING: {KafkaStreamsState.REBALANCING, KafkaStreamsState.PENDING_SHUTDOWN,
                                KafkaStreamsState.PENDING_ERROR},
    KafkaStreamsState.PENDING_SHUTDOWN: {KafkaStreamsState.NOT_RUNNING},
    KafkaStreamsState.NOT_RUNNING: set(),
    KafkaStreamsState.PENDING_ERROR: {KafkaStreamsState.ERROR},
    KafkaStreamsState.ERROR: set(),
}

#: ``listener(new_state, old_state)``
StateListener = Callable[[KafkaStreamsState, KafkaStreamsState], None]

#: The longest pause between two attempts to connect to a broker (the Java clients' default).
RECONNECT_BACKOFF_MAX_MS = 1_000
#: ``handler(exception)``: called once when a stream thread dies; the instance then shuts
#: down into ERROR (Kafka Streams' SHUTDOWN_CLIENT response).
UncaughtExceptionHandler = Callable[[BaseException], None]


class KafkaStreams:
    """One instance of the application described by ``topology`` and ``config``.

    Client settings (security, timeouts) come from the config's ``client_configs``,
    ``consumer_configs``, ``producer_configs`` and ``admin_configs``.
    """

    #: The instance states, as ``KafkaStreams.State`` in Kafka Streams (same as KafkaStreamsState).
    State = KafkaStreamsState

    def __init__(self, topology: Topology, config: StreamsConfig | Mapping[str, Any]) -> None:
        self.config = StreamsConfig.from_mapping(config) if not isinstance(config, StreamsConfig) else config
        topology.validate()
        check_topic_names(topology, self.config)
        check_snapshot_storage(self.config)
        prepare_state_dir(self.config)
        self.topology = topology
        #: The RocksDB memory budget all stores of this instance share (StreamsConfig.rocksdb_memory_bytes).
        self.rocksdb_memory = RocksDBMemory.for_config(self.config)
        self.process_id = uuid.uuid4()
        self.client_id = f"{self.config.application_id}-{self.process_id}"
        #: This instance's key in the status topic.
        self.instance_id = self.config.instance_id or f"{socket.gethostname()}-{os.getpid()}"
        self.status_publisher: StatusPublisher | None = None
        #: The instance's own metrics endpoint (StreamsConfig.metrics_port) and its URL.
        self._metrics_server: InstanceMetricsEndpoint | None = None
        self.metrics_endpoint: str | None = None
        #: Reads ``<application_id>-control`` (docs/control-topic.md) while the instance runs.
        self.control_listener: ControlListener | None = None
        #: The restart command that closed this instance, if one did: its host starts the
        #: next incarnation (instance/host.py).
        self.restart_command: ControlCommand | None = None
        #: Answers remote queries from ``<application_id>-queries`` (docs/interactive-queries.md).
        self.query_responder: QueryResponder | None = None
        self._state = KafkaStreamsState.CREATED
        self._state_lock = threading.Condition()
        self._state_listener: StateListener | None = None
        self._exception_handler: UncaughtExceptionHandler | None = None
        self._restore_listener: StateRestoreListener | None = None
        self._standby_listener: StandbyUpdateListener | None = None
        self.threads: list[StreamThread] = []
        self.internal_topics: list[InternalTopic] = []
        #: Every topic the application reads or writes -> "source", "sink", "changelog" or
        #: "repartition" (known once started; the stream threads watch them).
        self.topic_roles: dict[str, str] = {}
        #: Subtopology id -> its number of tasks (known once started; queries route keys by it).
        self.task_counts: dict[int, int] = {}
        self._error_closer: threading.Thread | None = None
        #: Held by close(): a second caller (SIGTERM after a stop command) waits for the
        #: first to finish, so the process does not exit before the tombstone is sent.
        self._close_lock = threading.Lock()

    # ------------------------------------------------------------------ listeners

    def set_state_listener(self, listener: StateListener) -> None:
        self._require_created("set a state listener")
        self._state_listener = listener

    def set_uncaught_exception_handler(self, handler: UncaughtExceptionHandler) -> None:
        self._require_created("set an uncaught exception handler")
        self._exception_handler = handler

    def set_global_state_restore_listener(self, listener: StateRestoreListener) -> None:
        self._require_created("set a restore listener")
        self._restore_listener = listener

    def set_standby_update_listener(self, listener: StandbyUpdateListener) -> None:
        self._require_created("set a standby update listener")
        self._standby_listener = listener

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> KafkaStreamsState:
        return self._state

    def _set_state(self, new: KafkaStreamsState) -> bool:
        with self._state_lock:
            old = self._state
            if new is old:
                return False
            if new not in _TRANSITIONS[old]:
                return False
            self._state = new
            self._state_lock.notify_all()
        log.info("stream-client %s: %s -> %s", self.client_id, old.value, new.value)
        if self.status_publisher is not None:
            self.status_publisher.publish_now()
        if self._state_listener is not None:
            try:
                self._state_listener(new, old)
            except Exception:  # a listener must not break the state machine
                log.exception("state listener failed on %s -> %s", old.value, new.value)
        return True

    def wait_for_state(self, *states: KafkaStreamsState, timeout: float) -> KafkaStreamsState:
        """Block until the instance is in one of ``states``. Raises TimeoutError after
        ``timeout`` seconds, and IllegalStateError at once if the instance reaches a final
        state (NOT_RUNNING, ERROR) that was not asked for."""
        deadline = time.monotonic() + timeout
        final = {KafkaStreamsState.NOT_RUNNING, KafkaStreamsState.ERROR}
        with self._state_lock:
            while self._state not in states:
                if self._state in final:
                    error = next((t.error for t in self.threads if t.error is not None), None)
                    raise IllegalStateError(f"instance {self.client_id} ended {self._state.value} while waiting for "
                                            f"{[s.value for s in states]}" + (f": {error!r}" if error else ""))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"instance {self.client_id} is {self._state.value}, not in "
                                       f"{[s.value for s in states]} after {timeout}s")
                self._state_lock.wait(remaining)
            return self._state

    def _require_created(self, action: str) -> None:
        if self._state is not KafkaStreamsState.CREATED:
            raise IllegalStateError(f"cannot {action}: the instance is {self._state.value}, not CREATED")

    # ------------------------------------------------------------------ clients

    def _common_client_configs(self, kind: str) -> dict[str, Any]:
        """The bootstrap servers and the ``client_configs`` a client of ``kind`` knows. A broker
        that was down is connected to again within a second of its return, as the Java
        clients do (kafka-python backs off up to 30 s: a thread resumed up to 30 s late). A
        failed metadata refresh never ends the client's metadata updates, and its I/O loop's
        socket look-ups are cheap (kafka/net_client.py). kafka-python's response class table is
        kept (kafka/response_classes.py) also when ``client_configs`` name a ``kafka_client``
        factory of the user's."""
        install_response_classes_kept()
        return {"bootstrap_servers": list(self.config.bootstrap_servers),
                "reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS, "kafka_client": engine_net_client,
                **settings_for(kind, self.config.client_configs)}

    def _new_consumer(self, **overrides: Any) -> Any:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(**{**self._common_client_configs(CONSUMER), "max_poll_records": 1000,
                                    "allow_auto_create_topics": False, **self.config.consumer_configs, **overrides})
        prepare_consumer(consumer)  # follows moved leaders, waits out brokers that are down
        return consumer

    def _new_producer(self, **overrides: Any) -> Any:
        from kafka import KafkaProducer

        # A transactional producer (exactly-once) is idempotent; its transactions time out
        # after 10 s as in Kafka Streams, unless producer_configs say otherwise.
        transactional = {"enable_idempotence": True, "transaction_timeout_ms": EOS_TRANSACTION_TIMEOUT_MS} \
            if overrides.get("transactional_id") else {}
        # A sink topic deleted while the application runs must fail it, not come back empty
        # with the broker's default partition count (brokers with auto.create.topics.enable).
        return KafkaProducer(**{**self._common_client_configs(PRODUCER), "acks": "all", "linger_ms": 5,
                                "allow_auto_create_topics": False,
                                "batch_size": 256 * 1024, **transactional, **self.config.producer_configs,
                                **overrides})

    def _new_admin(self) -> Any:
        from kafka import KafkaAdminClient

        return KafkaAdminClient(**{**self._common_client_configs(ADMIN), "client_id": f"{self.client_id}-admin",
                                   **self.config.admin_configs})

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Check the state directory, validate against the brokers, create internal topics,
        start the stream threads. Nothing is created on the broker when a task directory holds
        another application's or task's state (ForeignStateError), the brokers cannot be
        reached (BrokerUnreachableError) or a check against them fails (ConfigError,
        MissingTopicError)."""
        self._require_created("start")
        check_state_directory(self.topology, self.config)
        self._start_metrics_endpoint()
        try:
            admin = open_admin(self.config, self._new_admin)
            try:
                check_replication_factor(admin, self.config)
                self._prepare_topics(admin)
                control_readable = self._control_topic_readable(admin)
            finally:
                admin.close()
            self._check_epoch()
        except BaseException:
            self._close_metrics_endpoint()
            raise
        self._set_state(KafkaStreamsState.REBALANCING)
        for index in range(1, self.config.num_stream_threads + 1):
            thread = StreamThread(
                index, self.topology, self.config, client_id=self.client_id, instance_id=self.instance_id,
                consumer_factory=self._new_consumer, producer_factory=self._new_producer,
                admin_factory=self._new_admin, process_id=self.process_id,
                restore_listener=self._restore_listener, standby_listener=self._standby_listener,
                on_state_change=self._on_thread_state, on_error=self._on_thread_error, topic_roles=self.topic_roles,
                rocksdb_memory=self.rocksdb_memory)
            self.threads.append(thread)
        self.status_publisher = StatusPublisher.for_instance(self, self.instance_id, self.config.instance_epoch)
        self.status_publisher.start()
        self.control_listener = ControlListener(self)
        self.query_responder = QueryResponder(self)
        try:
            self.control_listener.start(check_read=control_readable is None)
            self.query_responder.start()
        except BaseException:
            self._close_listeners()
            self.control_listener = self.query_responder = None
            self._close_status_publisher(clean=True)
            self._close_metrics_endpoint()
            raise
        raise_gc_thresholds()  # fewer collections while processing (garbage_collection.py)
        for thread in self.threads:
            thread.start()
        log.info("stream-client %s started %d stream thread(s) on %s", self.client_id, len(self.threads),
                 socket.gethostname())

    def _start_metrics_endpoint(self) -> None:
        """Bind StreamsConfig.metrics_port, if set, before anything is created on the brokers."""
        if self.config.metrics_port is None:
            return
        self._metrics_server = InstanceMetricsEndpoint(self.config.application_id, self.config.metrics_port,
                                                       self._last_status_document)
        self.metrics_endpoint = self._metrics_server.start()

    def _last_status_document(self) -> InstanceStatus | None:
        return None if self.status_publisher is None else self.status_publisher.last_document

    def _close_metrics_endpoint(self) -> None:
        if self._metrics_server is not None:
            self._metrics_server.close()
            self._metrics_server = None

    def _prepare_topics(self, admin: Any) -> None:
        external = [self.topology.decorate_topic(t, self.config.application_id)
                    for t in self.topology.source_topics() if not self.topology.is_internal_topic(t)]
        sinks = self.topology.sink_topics()
        counts = fetch_partition_counts(admin, external + sinks, {**{t: "Write" for t in sinks},
                                                                  **{t: "Read" for t in external}},
                                        doing=f"starting application {self.config.application_id!r} (its source "
                                              f"topics are read, its sink topics written)")
        for role, topics in (("source", external), ("sink", sinks)):
            missing = sorted(set(topics) - set(counts))
            if missing:
                raise MissingTopicError(
                    f"{role} topics {missing} do not exist on {','.join(self.config.bootstrap_servers)}; create "
                    f"them before starting application {self.config.application_id!r}", topics=missing)
        self.internal_topics = internal_topics(self.topology, self.config.application_id, counts)
        self.task_counts = self.topology.validate_partition_counts(counts, self.config.application_id)
        self.topic_roles = {**{topic: "source" for topic in external}, **{topic: "sink" for topic in sinks},
                            **{topic.name: topic.kind for topic in self.internal_topics}}
        check_existing_changelogs(admin, self.internal_topics, self.config)
        manager = InternalTopicManager(admin, replication_factor=self.config.replication_factor)
        manager.ensure([*self.internal_topics, topology_topic(self.config.application_id)])
        ensure_status_topic(admin, self.config.application_id)
        ensure_control_topic(admin, self.config.application_id)
        ensure_query_topics(admin, self.config.application_id)
        self._record_topology(counts)
        dead_letters = list(dead_letter_topics(self.config))
        present = fetch_partition_counts(admin, dead_letters)
        manager.ensure([InternalTopic(topic, 1, {}, "dead-letter", -1)
                        for topic in dead_letters if topic not in present])
        self.topic_roles.update({topic: "dead-letter" for topic in dead_letters})

    def _control_topic_readable(self, admin: Any) -> bool | None:
        """True when the brokers say this principal may Read the control topic (the control
        listener then skips its first fetch, which waits CONTROL_POLL_MS), None when they do
        not say; refused, an AuthorizationError before anything runs."""
        topic = control_topic_name(self.config.application_id)
        operations = authorized_operations(admin, topic)
        if operations is None:
            return None
        if "READ" not in operations:
            raise control_read_refused(self.instance_id, topic)
        return True

    def _record_topology(self, partition_counts: Mapping[str, int]) -> None:
        """Record what this topology means for its state in ``<application_id>-topology``
        (streams/redeploy/), before any thread processes: the plan of the next deploy compares with it."""
        recorded = describe_topology(self.topology, self.config, partition_counts, recorded_at_ms=wall_clock_ms())
        producer = self._new_producer(client_id=f"{self.client_id}-topology-recorder", linger_ms=0)
        try:
            write_recorded_topology(producer, recorded)
        finally:
            close_producer(producer, 5)

    def _check_epoch(self) -> None:
        """Refuse to start when the status topic shows a newer epoch for this instance id:
        a newer incarnation of it runs (docs/spark.md: the supervisor restarts it with a higher epoch)."""
        try:
            documents = read_status_documents(list(self.config.bootstrap_servers), self.config.application_id,
                                              client_configs={**self.config.client_configs,
                                                              **self.config.consumer_configs},
                                              allow_empty=True)
        except UnknownApplicationError:
            return  # the topic was created a moment ago and its metadata has not spread yet: empty
        document = documents.get(self.instance_id)
        if document is not None and document.epoch > self.config.instance_epoch:
            raise FencedInstanceError(
                f"instance {self.instance_id!r} refuses to start with epoch {self.config.instance_epoch}: "
                f"{status_topic_name(self.config.application_id)!r} shows epoch {document.epoch} for it "
                f"(published by pid {document.pid} on {document.host}); a newer incarnation exists")

    def close(self, timeout: float | None = None) -> bool:
        """Stop every stream thread cleanly (commit, checkpoint, leave the group).
        Returns False if a thread did not stop within ``timeout`` seconds. After a thread died,
        waits for the error shutdown instead (its last status document says ERROR). Concurrent
        calls (a control-topic stop and SIGTERM) wait for the first to finish."""
        if not self._close_lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            if self._state is KafkaStreamsState.NOT_RUNNING:
                return True
            if self._state in (KafkaStreamsState.PENDING_ERROR, KafkaStreamsState.ERROR):
                return self._wait_for_error_shutdown(timeout)
            self._set_state(KafkaStreamsState.PENDING_SHUTDOWN)
            self._close_listeners()
            stopped = self._wait_for_threads(timeout)
            if stopped:
                self._set_state(KafkaStreamsState.NOT_RUNNING)
            self._close_status_publisher(clean=stopped)
            self._close_metrics_endpoint()
            return stopped
        finally:
            self._close_lock.release()

    def _close_listeners(self) -> None:
        """Stop reading commands and queries (both listeners)."""
        for listener in (self.control_listener, self.query_responder):
            if listener is not None:
                listener.close()

    def _close_status_publisher(self, *, clean: bool) -> None:
        """A clean stop removes this instance from the status topic (tombstone); otherwise
        its last document stays, for on-call to see what it was doing."""
        if self.status_publisher is not None:
            try:
                self.status_publisher.close(clean=clean)
            except Exception:  # status is best effort while stopping
                log.exception("closing the status publisher of %s failed", self.instance_id)

    def _wait_for_error_shutdown(self, timeout: float | None) -> bool:
        """After a thread died: wait until the error shutdown has stopped the threads and sent
        the last status document (state ERROR), so nothing runs once close() returns True
        (False when a thread it gave up on still runs)."""
        closer = self._error_closer
        if closer is None or closer is threading.current_thread():
            return self._wait_for_threads(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        closer.join(timeout)
        if closer.is_alive():
            return False
        # a thread the error shutdown gave up on (stuck) may end later: wait for it as well
        return not join_threads(self._running_threads(), deadline, f"stream-client {self.client_id} closing")

    def _running_threads(self) -> list[StreamThread]:
        return [t for t in self.threads if t.is_alive() and t is not threading.current_thread()]

    def _wait_for_threads(self, timeout: float | None) -> bool:
        """Tell every stream thread to stop and wait up to ``timeout`` (None: until they
        did); a thread still running is named every REPORT_EVERY_S with where it is."""
        for thread in self.threads:
            thread.shutdown()
        deadline = None if timeout is None else time.monotonic() + timeout
        return not join_threads(self._running_threads(), deadline, f"stream-client {self.client_id} closing")

    def __enter__(self) -> KafkaStreams:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ thread events

    def _on_thread_state(self, thread: StreamThread, new: StreamThreadState, old: StreamThreadState) -> None:
        if self._state not in (KafkaStreamsState.REBALANCING, KafkaStreamsState.RUNNING):
            return
        live = [t for t in self.threads if t.state is not StreamThreadState.DEAD]
        if live and all(t.state is StreamThreadState.RUNNING for t in live):
            self._set_state(KafkaStreamsState.RUNNING)
        elif new in (StreamThreadState.PARTITIONS_REVOKED, StreamThreadState.PARTITIONS_ASSIGNED):
            self._set_state(KafkaStreamsState.REBALANCING)

    def _on_thread_error(self, thread: StreamThread, error: BaseException) -> None:
        if not self._set_state(KafkaStreamsState.PENDING_ERROR):
            return
        if self._exception_handler is not None:
            try:
                self._exception_handler(error)
            except Exception:
                log.exception("uncaught exception handler failed")

        def shut_down() -> None:
            self._close_listeners()
            bound_s = cast(int, self.config.task_timeout_ms) / 1000  # a number of ms once the config is built
            if not self._wait_for_threads(bound_s):
                # stuck in user code or a RocksDB write stall: the instance ends without them
                # (they are daemon threads), as after a crash; nothing committed is lost
                log.error("stream-client %s: %s did not stop within task_timeout_ms (%.0f s) of the error; the "
                          "instance goes to ERROR without them", self.client_id,
                          ", ".join(f"{t.name} (in {thread_location(t) or 'no Python code'})"
                                    for t in self._running_threads()), bound_s)
            self._set_state(KafkaStreamsState.ERROR)
            self._close_status_publisher(clean=False)
            self._close_metrics_endpoint()

        self._error_closer = threading.Thread(target=shut_down, name=f"{self.client_id}-error-shutdown", daemon=True)
        self._error_closer.start()

    # ------------------------------------------------------------------ interactive queries

    def query(self, request: StateQueryRequest, timeout: float = 10.0) -> StateQueryResult:
        """Answer ``request`` from this instance's stores (docs/interactive-queries.md): each
        stream thread answers for its tasks between two records, so an answer and its position
        are consistent. Raises InstanceNotRunningError, UnknownStoreError, InvalidQueryError,
        QueryTimeoutError; a partition this instance cannot answer for is a failed result."""
        if self._state not in (KafkaStreamsState.RUNNING, KafkaStreamsState.REBALANCING):
            raise InstanceNotRunningError(f"instance {self.instance_id} is {self._state.value}: queries need a "
                                          f"RUNNING or REBALANCING instance")
        target = resolve_target(self.topology, self.config, self.task_counts, request, self.instance_id)
        return query_threads(list(self.threads), target, timeout)

    def query_metadata_for_key(self, store: str, key: Any) -> KeyQueryMetadata:
        """The partition and task of ``key`` in ``store``, the instance running that task and
        those keeping standbys of it, as the instances' status documents say now."""
        if not self.task_counts:
            raise InstanceNotRunningError(f"instance {self.instance_id} has not started: the partitions of "
                                          f"store {store!r} are not known yet")
        documents = read_status_documents(list(self.config.bootstrap_servers), self.config.application_id,
                                          client_configs={**self.config.client_configs,
                                                          **self.config.consumer_configs}, allow_empty=True)
        return key_metadata(self.topology, self.config, self.task_counts, store, key, documents)

    def metrics(self) -> dict[str, dict[str, int]]:
        """Counters of the tasks this instance runs now, by task id (processed,
        punctuated, dropped records by reason)."""
        return {str(task_id): task.metrics.as_dict()
                for thread in self.threads for task_id, task in sorted(thread.tasks.items())}
