"""The instance side of remote queries: read ``<application_id>-queries``, answer on
``<application_id>-query-answers``.

A daemon thread per ``KafkaStreams`` instance reads the requests topic with its own
group-less consumer from the end offset captured at start (like the control listener). A
request for another application, past its deadline or malformed is logged and skipped. A
valid one is answered through the same path as ``KafkaStreams.query`` (local.py): the
stream threads answer between two records. The instance answers only for the partitions
it holds a replica of (it stays silent otherwise), and every instance answers a request
that no instance can serve (unknown store, wrong query type, bad key) with the error.

Requests are answered one at a time, each within its deadline, so a flood of queries
delays answers but never the processing: the stream threads spend one read per request.
Only the query types of requests.py exist on the wire: a request cannot write, run code,
or name a store of another application (it reads this application's topology only).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.errors import InvalidQueryError, QueryError, StreamsError
from airflow_stateful_provider.streams.queries.local import query_threads, resolve_target
from airflow_stateful_provider.streams.queries.results import NOT_OWNED
from airflow_stateful_provider.streams.queries.wire import (
    MAX_ANSWER_BYTES,
    QUERY_TOPIC_CONFIG,
    QueryAnswer,
    RemoteQuery,
    answers_topic_name,
    queries_topic_name,
)
from airflow_stateful_provider.streams.topics.internal_topics import InternalTopic
from airflow_stateful_provider.streams.topics.topic_manager import InternalTopicManager

__all__ = ["QueryResponder", "ensure_query_topics"]

log = logging.getLogger(__name__)

#: Longest wait of one poll of the requests topic (also how long close() may wait for it).
QUERY_POLL_MS = 200
#: Longest time an instance spends answering one request (the caller's deadline may be shorter).
MAX_ANSWER_WAIT_S = 5.0


def ensure_query_topics(admin: Any, application_id: str, *, replication_factor: int = -1) -> None:
    """Create ``<application_id>-queries`` and ``-query-answers`` if missing."""
    InternalTopicManager(admin, replication_factor=replication_factor).ensure(
        [InternalTopic(name, 1, dict(QUERY_TOPIC_CONFIG), "queries", -1)
         for name in (queries_topic_name(application_id), answers_topic_name(application_id))])


class QueryResponder:
    """Answers remote queries for one ``KafkaStreams`` instance (see module docstring).

    ``streams`` needs ``config``, ``instance_id``, ``client_id``, ``topology``,
    ``task_counts``, ``threads``, ``_new_consumer(**overrides)`` and ``_new_producer(**overrides)``.
    """

    def __init__(self, streams: Any) -> None:
        self._streams = streams
        self.application_id = streams.config.application_id
        self.instance_id = streams.instance_id
        self._stopping = threading.Event()
        self._consumer: Any = None
        self._producer: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Assign the requests topic at its end, then start answering: a request sent after
        this returns is seen."""
        from kafka import TopicPartition as KafkaTopicPartition

        topic = queries_topic_name(self.application_id)
        consumer = self._streams._new_consumer(group_id=None, enable_auto_commit=False, auto_offset_reset="latest",
                                               client_id=f"{self._streams.client_id}-query-responder")
        try:
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                raise StreamsError(f"query topic {topic!r} does not exist (it is created at instance start)")
            tps = [KafkaTopicPartition(topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            for tp, end in consumer.end_offsets(tps).items():
                consumer.seek(tp, end)
            self._producer = self._streams._new_producer(client_id=f"{self._streams.client_id}-query-answers",
                                                         linger_ms=0, acks=1)
        except BaseException:
            consumer.close()
            raise
        self._consumer = consumer
        self._thread = threading.Thread(target=self._run, name=f"{self.instance_id}-query-responder", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    fetched = self._consumer.poll(timeout_ms=QUERY_POLL_MS)
                except Exception:
                    log.exception("query responder of %s: polling failed; retrying", self.instance_id)
                    self._stopping.wait(1.0)
                    continue
                for records in fetched.values():
                    for record in records:
                        if self._stopping.is_set():
                            return
                        try:
                            self._answer_record(record)
                        except Exception:
                            log.exception("query request at offset %d: answering failed", record.offset)
        finally:
            for client, close in ((self._consumer, lambda c: c.close(autocommit=False)),
                                  (self._producer, lambda c: c.close(timeout=5))):
                try:
                    close(client)
                except Exception:
                    log.exception("query responder of %s: error closing %s", self.instance_id, type(client).__name__)

    def _answer_record(self, record: Any) -> None:
        try:
            query = RemoteQuery.from_json_bytes(record.value)
        except InvalidQueryError as exc:
            log.warning("query request at offset %d skipped: %s", record.offset, exc)
            return
        if query.application_id != self.application_id:
            log.warning("query %s is for application %r, not %r; ignored", query.request_id, query.application_id,
                        self.application_id)
            return
        left_s = (query.deadline_ms - wall_clock_ms()) / 1000
        if left_s <= 0:
            return  # the caller has given up
        streams = self._streams
        try:
            target = resolve_target(streams.topology, streams.config, streams.task_counts, query.request,
                                    self.instance_id)
            result = query_threads(list(streams.threads), target, min(left_s, MAX_ANSWER_WAIT_S))
        except QueryError as exc:
            self._send(QueryAnswer(query.request_id, self.instance_id, error=(type(exc).__name__, str(exc)),
                                   store_kind=getattr(exc, "kind", "")))
            return
        except StreamsError as exc:  # a stream thread stopped while the query waited: the task's next owner answers
            log.info("query %s not answered: %s", query.request_id, exc)
            return
        held = tuple(r for r in result.partition_results.values() if r.failure_reason != NOT_OWNED)
        if not held:
            return  # another instance answers for these partitions
        answer = QueryAnswer(query.request_id, self.instance_id, tuple(sorted(target.partitions)), held)
        if len(answer.to_json_bytes()) > MAX_ANSWER_BYTES:
            answer = QueryAnswer(query.request_id, self.instance_id, error=(
                "InvalidQueryError", f"the answer of instance {self.instance_id} is over {MAX_ANSWER_BYTES} bytes; "
                f"ask for fewer records (a lower limit) and page with the continuation token"))
        self._send(answer)

    def _send(self, answer: QueryAnswer) -> None:
        self._producer.send(answers_topic_name(self.application_id), key=answer.request_id.encode(),
                            value=answer.to_json_bytes())
        self._producer.flush(timeout=5)
