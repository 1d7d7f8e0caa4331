"""The instance side of remote queries (responder.py) on a fake instance: what it answers,
what it ignores (another application's requests, expired or malformed ones), and that an
instance holding none of the asked partitions stays silent."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from airflow_stateful_provider.streams import KeyQuery, RangeQuery, StateQueryRequest, StreamsConfig
from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.queries import local
from airflow_stateful_provider.streams.queries.responder import QueryResponder
from airflow_stateful_provider.streams.queries.results import QueryResult
from airflow_stateful_provider.streams.queries.wire import QueryAnswer, RemoteQuery
from tests.unit.streams.queries.test_queries import _topology


class FakeThread:
    """Runs every safe-point action at once."""

    def run_at_safe_point(self, action):
        future = Future()
        future.set_result(action(self))
        return future


class FakeProducer:
    def __init__(self):
        self.sent = []

    def send(self, topic, key, value):
        self.sent.append((topic, key, QueryAnswer.from_json_bytes(value)))

    def flush(self, timeout=None):
        pass


@pytest.fixture
def responder(monkeypatch):
    """A responder whose stream thread holds ``responder.held`` (QueryResults by partition)."""
    held: dict[int, QueryResult] = {}
    monkeypatch.setattr(local, "answer_on_thread",
                        lambda thread, target: [r for p, r in held.items() if p in target.partitions])
    streams = SimpleNamespace(config=StreamsConfig(application_id="app", bootstrap_servers="x:1"),
                              instance_id="i-0", client_id="c", topology=_topology(), task_counts={0: 4},
                              threads=[FakeThread()])
    made = QueryResponder(streams)
    made._producer = FakeProducer()
    made.held = held
    return made


def _record(application_id, request, *, deadline_ms=None):
    query = RemoteQuery.new(application_id, request, wall_clock_ms() + 5_000 if deadline_ms is None else deadline_ms)
    return query, SimpleNamespace(offset=7, value=query.to_json_bytes())


RANGE = StateQueryRequest.in_store("kv").with_query(RangeQuery())


def test_it_answers_for_the_partitions_it_holds(responder):
    responder.held.update({1: QueryResult(1, "0_1", "i-0", []), 3: QueryResult(3, "0_3", "i-0", [])})
    query, record = _record("app", RANGE)
    responder._answer_record(record)
    [(topic, key, answer)] = responder._producer.sent
    assert (topic, key) == ("app-query-answers", query.request_id.encode())
    assert answer.partitions == (0, 1, 2, 3) and [r.partition for r in answer.results] == [1, 3]


def test_it_stays_silent_for_partitions_it_does_not_hold(responder):
    responder._answer_record(_record("app", RANGE)[1])
    assert responder._producer.sent == []


def test_it_ignores_other_applications_expired_and_malformed_requests(responder):
    responder.held.update({p: QueryResult(p, f"0_{p}", "i-0", []) for p in range(4)})
    responder._answer_record(_record("another-app", RANGE)[1])
    responder._answer_record(_record("app", RANGE, deadline_ms=wall_clock_ms() - 1)[1])
    responder._answer_record(SimpleNamespace(offset=8, value=b'{"format_version": 1, "request_id": "q"}'))
    responder._answer_record(SimpleNamespace(offset=9, value=b"x" * 70_000))
    assert responder._producer.sent == []


def test_a_request_nobody_can_serve_is_refused_with_the_reason(responder):
    responder._answer_record(_record("app", StateQueryRequest.in_store("nope").with_query(KeyQuery("k")))[1])
    responder._answer_record(_record("app", StateQueryRequest.in_store("sessions").with_query(KeyQuery("k")))[1])
    (_, _, unknown), (_, _, wrong) = responder._producer.sent
    assert unknown.error[0] == "UnknownStoreError" and "no store 'nope'" in unknown.error[1]
    assert wrong.error[0] == "WrongStoreKindError" and wrong.store_kind == "session"
