"""A stream thread that dies on an exception in user code under exactly-once commits
nothing of its open transaction: neither the failed task's writes nor any other task's.
Each case fails an instance, checks that what is committed is a consistent cut, restarts on
the same state directory without the fault and checks every key's output exactly 1..n and
the store (tests/integration/failure_oracle.py)."""

from __future__ import annotations

import time
import uuid

import pytest

from airflow_stateful_provider.streams import ProcessingError
from tests.integration.failure_oracle import (
    PARTITIONS,
    CountingApp,
    assert_committed_state_consistent,
    assert_exact,
    produce_numbered,
)
from tests.integration.instances import create_topics

pytestmark = pytest.mark.kafka

RECORDS = 5_000
KEYS = 100


@pytest.fixture
def app(bootstrap_servers, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    counting = CountingApp(bootstrap_servers, suffix, tmp_path, processing_guarantee="exactly_once_v2")
    create_topics(bootstrap_servers, {counting.input: PARTITIONS, counting.output: PARTITIONS})
    return counting


def test_processor_exception_commits_nothing_of_the_open_transaction(app):
    expected = produce_numbered(app.bootstrap_servers, app.input, RECORDS, KEYS, start_ms=int(time.time() * 1000))
    _, seen = app.run_until_failed(app_configs={"fail_at": RECORDS // 2})
    assert len(seen) == 1 and isinstance(seen[0], ProcessingError), seen
    assert f"record {RECORDS // 2}" in str(seen[0])
    assert_committed_state_consistent(app)

    app.run_to_end()
    assert_exact(app.outputs_per_key(), app.store_counts(), expected)


def test_punctuator_exception_commits_nothing_of_the_open_transaction(app):
    start = int(time.time() * 1000)
    expected = produce_numbered(app.bootstrap_servers, app.input, RECORDS, KEYS, start_ms=start)
    _, seen = app.run_until_failed(app_configs={"punctuate_fail_at": start + RECORDS // 2})
    assert len(seen) == 1 and isinstance(seen[0], ProcessingError) and "punctuat" in str(seen[0]), seen
    assert_committed_state_consistent(app)

    app.run_to_end(app_configs={"punctuate_fail_at": start + 10 * RECORDS})
    assert_exact(app.outputs_per_key(), app.store_counts(), expected)
