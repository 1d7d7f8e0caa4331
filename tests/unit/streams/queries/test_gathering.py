"""The caller side of remote queries (remote.py) on scripted answers: when it stops
waiting, which answer wins, and what an instance's refusal or silence becomes."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from airflow_stateful_provider.streams import (
    KeyQuery,
    QueryResult,
    QueryTimeoutError,
    RangeQuery,
    StateQueryRequest,
    UnknownStoreError,
    WrongStoreKindError,
)
from airflow_stateful_provider.streams.queries.remote import _gather
from airflow_stateful_provider.streams.queries.wire import QueryAnswer, RemoteQuery


class ScriptedConsumer:
    """Gives one batch of answer records per poll, then nothing."""

    def __init__(self, *batches):
        self.batches = list(batches)
        self.polls = 0

    def poll(self, timeout_ms):
        self.polls += 1
        if not self.batches:
            time.sleep(timeout_ms / 1000)
            return {}
        return {"answers-0": self.batches.pop(0)}


def _record(query, answer):
    return SimpleNamespace(key=query.request_id.encode(), value=answer.to_json_bytes())


def _ok(partition, instance, *, standby=False, lag=0, value=1):
    return QueryResult(partition, f"0_{partition}", instance, value, standby=standby, lag=lag)


def _restoring(partition, instance):
    return QueryResult(partition, f"0_{partition}", instance, failure_reason="restoring", failure="restoring")


def _query(request):
    return RemoteQuery.new("app", request, 0)


KEY = StateQueryRequest.in_store("counts").with_query(KeyQuery("k"))


def test_an_active_answer_ends_the_wait_at_once():
    query = _query(KEY)
    other = SimpleNamespace(key=b"query-someone-else", value=b"not even json")
    consumer = ScriptedConsumer([other, _record(query, QueryAnswer(query.request_id, "i-0", (2,), (_ok(2, "i-0"),)))])
    started = time.monotonic()
    result = _gather(consumer, query, time.monotonic() + 5, 5_000)
    assert result.value() == 1 and result.only_partition_result().instance_id == "i-0"
    assert consumer.polls == 1 and time.monotonic() - started < 1


def test_without_stale_reads_a_restoring_active_is_the_answer():
    query = _query(KEY)
    consumer = ScriptedConsumer([_record(query, QueryAnswer(query.request_id, "i-0", (2,), (_restoring(2, "i-0"),)))])
    result = _gather(consumer, query, time.monotonic() + 5, 5_000)
    assert result.only_partition_result().failure_reason == "restoring" and consumer.polls == 1


def test_with_stale_reads_a_standby_may_answer_for_a_restoring_active():
    query = _query(KEY.with_stale_reads(10))
    consumer = ScriptedConsumer(
        [_record(query, QueryAnswer(query.request_id, "i-0", (2,), (_restoring(2, "i-0"),)))],
        [_record(query, QueryAnswer(query.request_id, "i-1", (2,), (_ok(2, "i-1", standby=True, lag=3),)))])
    result = _gather(consumer, query, time.monotonic() + 5, 5_000).only_partition_result()
    assert (result.instance_id, result.standby, result.lag, result.get_result()) == ("i-1", True, 3, 1)


def test_a_range_waits_for_every_partition_and_names_the_silent_one():
    query = _query(StateQueryRequest.in_store("counts").with_query(RangeQuery()))
    consumer = ScriptedConsumer([_record(query, QueryAnswer(query.request_id, "i-0", (0, 1), (_ok(0, "i-0"),)))])
    started = time.monotonic()
    result = _gather(consumer, query, time.monotonic() + 0.6, 600)
    assert time.monotonic() - started >= 0.55  # waited for partition 1 until the deadline
    assert result.partition_results[0].is_success
    assert result.partition_results[1].failure_reason == "not_owned"
    assert "no instance answered for partition 1" in result.partition_results[1].failure


def test_refusals_raise_the_instances_error_and_silence_times_out():
    query = _query(KEY)
    refused = QueryAnswer(query.request_id, "i-0", error=("UnknownStoreError", "application has no store 'x'"))
    with pytest.raises(UnknownStoreError, match="instance i-0: application has no store 'x'"):
        _gather(ScriptedConsumer([_record(query, refused)]), query, time.monotonic() + 5, 5_000)
    wrong = QueryAnswer(query.request_id, "i-0", error=("WrongStoreKindError", "a versioned store"),
                        store_kind="versioned")
    with pytest.raises(WrongStoreKindError) as caught:
        _gather(ScriptedConsumer([_record(query, wrong)]), query, time.monotonic() + 5, 5_000)
    assert caught.value.kind == "versioned"
    with pytest.raises(QueryTimeoutError, match="no instance of application 'app' answered"):
        _gather(ScriptedConsumer(), query, time.monotonic() + 0.3, 300)
