"""Publishing the status topic ``<application_id>-status`` from inside an instance.

A :class:`StatusPublisher` per instance sends the instance's document (built by
:func:`~.collector.status_document_from_instance`) keyed by instance id, every
``status_interval_ms`` from a daemon thread and as soon as possible after
:meth:`StatusPublisher.publish_now` (the runtime calls it on state changes), and a tombstone
on clean shutdown. It also creates the status and control topics with their configs.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.durations import duration_arg_ms
from airflow_stateful_provider.streams.errors import BrokerUnreachableError, StatusFormatError
from airflow_stateful_provider.streams.kafka.clients import connection_errors, construct_client, servers_text
from airflow_stateful_provider.streams.kafka.producer_close import close_producer
from airflow_stateful_provider.streams.status.collector import (
    RestoreRateTracker,
    status_document_from_instance,
)
from airflow_stateful_provider.streams.status.document import (
    DEFAULT_STATUS_INTERVAL_MS,
    InstanceStatus,
    control_topic_name,
    status_topic_name,
)
from airflow_stateful_provider.streams.status.instance_view import PublishedInstanceView
from airflow_stateful_provider.streams.topics.internal_topics import InternalTopic
from airflow_stateful_provider.streams.topics.topic_manager import InternalTopicManager

__all__ = [
    "CONTROL_TOPIC_CONFIG",
    "STATUS_TOPIC_CONFIG",
    "StatusPublisher",
    "ensure_control_topic",
    "ensure_status_topic",
]

log = logging.getLogger(__name__)

#: Compacted: only the latest document per instance matters. Short segments so compaction
#: can run (the active segment is never compacted); tombstones kept a day so slow readers
#: still see an instance leave.
STATUS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "3600000", "delete.retention.ms": "86400000"}
#: Commands are events, not state: time retention.
CONTROL_TOPIC_CONFIG = {"cleanup.policy": "delete"}
#: Acknowledgements a publisher keeps repeating in its documents.
MAX_ACKNOWLEDGEMENTS = 50


def ensure_status_topic(admin: Any, application_id: str, *, replication_factor: int = -1) -> bool:
    """Create ``<application_id>-status`` (1 partition, compacted) if missing. Returns
    whether it was created; raises StreamsError if it exists with another partition count."""
    topic = InternalTopic(status_topic_name(application_id), 1, dict(STATUS_TOPIC_CONFIG), "status", -1)
    return bool(InternalTopicManager(admin, replication_factor=replication_factor).ensure([topic]))


def ensure_control_topic(admin: Any, application_id: str, *, replication_factor: int = -1) -> bool:
    """Create ``<application_id>-control`` (1 partition, delete policy) if missing."""
    topic = InternalTopic(control_topic_name(application_id), 1, dict(CONTROL_TOPIC_CONFIG), "control", -1)
    return bool(InternalTopicManager(admin, replication_factor=replication_factor).ensure([topic]))


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
        clock: Callable[[], int] = wall_clock_ms,
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
    def for_instance(cls, streams: PublishedInstanceView, instance_id: str, epoch: int, *, producer: Any = None,
                     status_interval_ms: int | timedelta | None = None) -> StatusPublisher:
        """A publisher of ``status_document_from_instance(streams, ...)`` with its own rate
        tracker, using the instance's bootstrap servers and client/producer configs."""
        config = streams.config
        tracker = RestoreRateTracker()
        interval = status_interval_ms if status_interval_ms is not None else config.status_interval_ms
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
            except Exception:  # status must never take the instance down
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
            except Exception:  # closing anyway; readers will see the document go stale
                log.exception("status publisher of %s: final %s not delivered", self.instance_id,
                              "tombstone" if clean else "document")
            finally:
                if self._owns_producer and not close_producer(self._producer, timeout):
                    log.warning("status publisher of %s: documents not delivered within %.0f s were dropped",
                                self.instance_id, timeout)

    def __enter__(self) -> StatusPublisher:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(clean=exc_type is None)


def _new_producer(bootstrap_servers: str | Sequence[str], client_configs: Mapping[str, Any], client_id: str) -> Any:
    from kafka import KafkaProducer

    # No auto-creation: a status topic created by the broker would have the delete policy;
    # ensure_status_topic() creates it compacted.
    configs = {"bootstrap_servers": bootstrap_servers, "client_id": client_id, "acks": "all", "linger_ms": 0,
               "max_block_ms": 10_000, "bootstrap_timeout_ms": 10_000, **client_configs,
               "allow_auto_create_topics": False}
    try:
        return construct_client(KafkaProducer, configs)
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"cannot reach Kafka at {servers_text(bootstrap_servers)} to publish status: "
                                     f"{exc}") from exc
