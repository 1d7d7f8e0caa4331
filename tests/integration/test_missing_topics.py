"""A topic the application needs disappears: the stream thread leaves RUNNING with an error
naming the topic within a bounded time (docs/failure-handling.md), the uncaught-exception
handler sees it, ``close(timeout)`` completes, and what was committed is a consistent cut."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from kafka import KafkaAdminClient

from airflow_stateful_provider.streams import KafkaStreamsState, MissingTopicError
from tests.integration.failure_oracle import (
    PARTITIONS,
    CountingApp,
    assert_committed_state_consistent,
    produce_numbered,
)
from tools.kafka.topics import create_topics, delete_topics
from tools.waits import wait_progressing, wait_until

pytestmark = pytest.mark.kafka

#: What the engine promises (docs/failure-handling.md): a missing topic fails the thread
#: within two minutes with the default settings, where the longest wait is a send waiting
#: the producer's max_block_ms (60 s) for the topic's metadata. The tests shorten that wait
#: to 10 s (PRODUCER_CONFIGS), so the bound here is what those 10 s leave of it.
BOUND_SECONDS = 70
PRODUCER_CONFIGS = {"max_block_ms": 10_000}


@pytest.fixture(params=["at_least_once", "exactly_once_v2"])
def app(request, bootstrap_servers, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    counting = CountingApp(bootstrap_servers, suffix, tmp_path, processing_guarantee=request.param,
                           producer_configs=PRODUCER_CONFIGS, commit_interval_ms=500)
    counting.create_topics()
    return counting


class Feeder(threading.Thread):
    """Keeps input flowing while the instance runs, so it keeps writing."""

    def __init__(self, app: CountingApp) -> None:
        super().__init__(daemon=True)
        self.app, self.stop = app, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            produce_numbered(self.app.bootstrap_servers, self.app.input, 200, 50, start_ms=int(time.time() * 1000))
            self.stop.wait(0.2)


def fails_naming(app: CountingApp, topic: str, make_missing, *, feed: bool = True) -> None:
    """Run an instance with input flowing, make ``topic`` missing once it runs, and check the
    failure: named, bounded, seen by the handler, closed within its timeout."""
    produce_numbered(app.bootstrap_servers, app.input, 2_000, 50, start_ms=int(time.time() * 1000))
    seen: list[BaseException] = []
    streams = app.streams()
    streams.set_uncaught_exception_handler(seen.append)
    feeder = Feeder(app)
    streams.start()
    try:
        wait_progressing(lambda: app.committed_total() >= 2_000, app.committed_total, "the first records committed",
                         measure="committed input offsets", context=lambda: f"state {streams.state}")
        if feed:
            feeder.start()
        make_missing()
        missing_at = time.monotonic()
        wait_until(lambda: streams.state is KafkaStreamsState.ERROR, BOUND_SECONDS + 60,
                   f"the instance to fail on the missing {topic}", lambda: f"state {streams.state}")
        took = time.monotonic() - missing_at
    finally:
        feeder.stop.set()
        started = time.monotonic()
        closed = streams.close(timeout=30)
        close_took = time.monotonic() - started
    assert closed and close_took < 35, f"close(timeout=30) returned {closed} after {close_took:.0f}s"
    assert took < BOUND_SECONDS, f"the missing topic was noticed after {took:.0f}s"
    assert len(seen) == 1 and isinstance(seen[0], MissingTopicError), seen
    assert topic in seen[0].topics and repr(topic) in str(seen[0]), seen[0]


def test_sink_topic_deleted_while_running(app):
    fails_naming(app, app.output, lambda: delete_topics(app.bootstrap_servers, [app.output]))


def test_changelog_topic_deleted_while_running(app):
    changelog = f"{app.app_id}-counts-changelog"
    fails_naming(app, changelog, lambda: delete_topics(app.bootstrap_servers, [changelog]))
    if app.config["processing_guarantee"] == "exactly_once_v2":
        assert_committed_state_consistent(app)


def test_input_topic_deleted_while_running(app):
    fails_naming(app, app.input, lambda: delete_topics(app.bootstrap_servers, [app.input]), feed=False)


def test_sink_topic_missing_at_start_is_refused_before_anything_is_created(bootstrap_servers, tmp_path):
    counting = CountingApp(bootstrap_servers, uuid.uuid4().hex[:8], tmp_path)
    create_topics(bootstrap_servers, {counting.input: PARTITIONS, counting.echo: 1})
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        before = set(admin.list_topics())
        streams = counting.streams()
        with pytest.raises(MissingTopicError, match=f"sink topics \\['{counting.output}'\\] do not exist") as raised:
            streams.start()
        assert raised.value.topics == [counting.output]
        assert set(admin.list_topics()) == before  # no changelog, status or control topic
    finally:
        admin.close()
