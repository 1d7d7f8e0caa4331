"""A kafka-python line goes through once a window, then with the count held back; other loggers
pass untouched (streams/process_logging.py). A clock the test moves; a real handler writing to
a string. tests/integration/test_replicated_cluster.py reads the instances' logs through broker
restarts."""

from __future__ import annotations

import io
import logging

import pytest

from airflow_stateful_provider.streams.process_logging import LOG_FORMAT, RepeatedClientLines, quiet_kafka_client


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def written():
    """(clock, lines written so far, a function logging one line to a named logger)."""
    clock, out = Clock(), io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    handler.addFilter(RepeatedClientLines(window_s=60, clock=clock))

    def log(name: str, level: int, message: str, *args) -> None:
        handler.handle(logging.LogRecord(name, level, __file__, 1, message, args or None, None))

    return clock, lambda: out.getvalue().splitlines(), log


def test_a_repeat_is_held_back_for_the_window_then_goes_through_with_its_count(written):
    clock, lines, log = written
    for _ in range(400):
        log("kafka.cluster", logging.WARNING, "No node available for metadata refresh - backoff/retry")
        clock.now += 0.125  # 50 s
    assert lines() == ["kafka.cluster WARNING No node available for metadata refresh - backoff/retry"]
    clock.now += 10
    log("kafka.cluster", logging.WARNING, "No node available for metadata refresh - backoff/retry")
    assert lines()[1:] == ["kafka.cluster WARNING No node available for metadata refresh - backoff/retry "
                           "(399 more like this in the last 60 s)"]
    clock.now += 61  # nothing held back since: no count
    log("kafka.cluster", logging.WARNING, "No node available for metadata refresh - backoff/retry")
    assert lines()[2:] == ["kafka.cluster WARNING No node available for metadata refresh - backoff/retry"]


def test_lines_differing_in_logger_level_or_text_each_go_through(written):
    _, lines, log = written
    log("kafka.net.connection", logging.ERROR, "<KafkaConnection node_id=%s>: Connection lost: %s", 1, "ECONNREFUSED")
    log("kafka.net.connection", logging.ERROR, "<KafkaConnection node_id=%s>: Connection lost: %s", 2, "ECONNREFUSED")
    log("kafka.net.connection", logging.ERROR, "<KafkaConnection node_id=%s>: Connection lost: %s", 1, "ECONNREFUSED")
    log("kafka.net.manager", logging.ERROR, "<KafkaConnection node_id=%s>: Connection lost: %s", 1, "ECONNREFUSED")
    log("kafka.net.connection", logging.WARNING, "<KafkaConnection node_id=%s>: Connection lost: %s", 1,
        "ECONNREFUSED")
    assert lines() == ["kafka.net.connection ERROR <KafkaConnection node_id=1>: Connection lost: ECONNREFUSED",
                       "kafka.net.connection ERROR <KafkaConnection node_id=2>: Connection lost: ECONNREFUSED",
                       "kafka.net.manager ERROR <KafkaConnection node_id=1>: Connection lost: ECONNREFUSED",
                       "kafka.net.connection WARNING <KafkaConnection node_id=1>: Connection lost: ECONNREFUSED"]


def test_the_engines_own_lines_are_never_held_back(written):
    _, lines, log = written
    for name in ("airflow_stateful_provider.streams.instance.stream_thread", "kafkaesque", "root"):
        log(name, logging.WARNING, "commit failed; committing again")
        log(name, logging.WARNING, "commit failed; committing again")
    assert len(lines()) == 6


def test_lines_whose_window_ended_are_forgotten_past_the_tracking_bound():
    clock = Clock()
    limit = RepeatedClientLines(window_s=60, clock=clock)
    passed = 0
    for n in range(2000):  # e.g. a line naming an offset: each one new
        passed += limit.filter(logging.LogRecord("kafka.x", logging.WARNING, __file__, 1, "offset %s", (n,), None))
        clock.now += 1
    assert passed == 2000 and len(limit._through) <= 1024


def test_quieted_once_with_the_format_of_the_process():
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    quiet_kafka_client(handler)
    quiet_kafka_client(handler)
    assert [type(f) for f in handler.filters] == [RepeatedClientLines]
    assert logging.getLogger("kafka").level == logging.WARNING
