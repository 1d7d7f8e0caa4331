"""Interactive queries without a broker: the request types and their JSON, answers on the
stores of a TopologyTestDriver, range pages merged across partitions, key routing, and
the errors a bad request gets before any thread sees it."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams import (
    InvalidQueryError,
    KeyQuery,
    MultiVersionedKeyQuery,
    Position,
    PositionBound,
    QueryResult,
    RangeQuery,
    Serdes,
    SessionQuery,
    SessionWindow,
    StateQueryRequest,
    StateQueryResult,
    StreamsConfig,
    TaskNotAvailableError,
    Topology,
    TopologyTestDriver,
    UnknownStoreError,
    VersionedKeyQuery,
    Windowed,
)
from airflow_stateful_provider.streams.processor import KeyValue, Processor
from airflow_stateful_provider.streams.queries.answering import key_partition, run_query
from airflow_stateful_provider.streams.queries.local import resolve_target
from airflow_stateful_provider.streams.queries.results import to_json_value
from airflow_stateful_provider.streams.queries.wire import QueryAnswer, RemoteQuery
from airflow_stateful_provider.streams.topology.store_builders import Stores

S = Serdes.string()
L = Serdes.int64()


class _Writer(Processor):
    """Writes each record ``key -> value`` into all three stores (value as a count)."""

    def init(self, context):
        self.kv = context.get_state_store("kv")
        self.sessions = context.get_state_store("sessions")
        self.versions = context.get_state_store("versions")

    def process(self, record):
        self.kv.put(record.key, int(record.value))
        self.sessions.put(Windowed(record.key, SessionWindow(record.timestamp, record.timestamp)), int(record.value))
        self.versions.put(record.key, int(record.value), record.timestamp)


def _topology() -> Topology:
    topology = Topology().add_source("in", "input", key_serde=S, value_serde=S)
    topology.add_processor("writer", _Writer, "in")
    topology.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("kv"), S, L), "writer")
    topology.add_state_store(Stores.session_store_builder(Stores.in_memory_session_store("sessions", 10_000), S, L),
                             "writer")
    topology.add_state_store(Stores.versioned_key_value_store_builder(
        Stores.in_memory_versioned_key_value_store("versions", 100_000), S, L), "writer")
    return topology


@pytest.fixture
def driver():
    with TopologyTestDriver(_topology()) as d:
        topic = d.create_input_topic("input", S, S)
        for key, value, ts in [("a", "1", 10), ("b", "2", 20), ("c", "3", 30), ("a", "4", 40), ("d", "5", 50)]:
            topic.pipe_input(key, value, ts)
        yield d


def test_each_query_type_answers_from_its_store_kind(driver):
    kv, sessions, versions = (driver.get_state_store(n) for n in ("kv", "sessions", "versions"))
    assert run_query(kv, "kv", KeyQuery.with_key("a"))[0] == 4
    assert run_query(kv, "kv", KeyQuery.with_key("zz"))[0] is None
    found, _, more = run_query(sessions, "sessions", SessionQuery.with_key("a"))
    assert [(kv_.key.window.start, kv_.value) for kv_ in found] == [(10, 1), (40, 4)] and not more
    found, _, _ = run_query(sessions, "sessions", SessionQuery.with_key_and_time_range("a", 20, 50))
    assert [kv_.value for kv_ in found] == [4]
    assert run_query(versions, "versions", VersionedKeyQuery.with_key("a"))[0].value == 4
    as_of = run_query(versions, "versions", VersionedKeyQuery.with_key("a").as_of_timestamp(39))[0]
    assert (as_of.value, as_of.timestamp, as_of.valid_to) == (1, 10, 40)
    assert run_query(versions, "versions", VersionedKeyQuery.with_key("a").as_of_timestamp(9))[0] is None
    all_versions = run_query(versions, "versions", MultiVersionedKeyQuery.with_key("a").with_ascending_timestamps())[0]
    assert [(v.value, v.timestamp) for v in all_versions] == [(1, 10), (4, 40)]


def test_a_range_pages_with_a_limit_and_a_continuation_token(driver):
    kv = driver.get_state_store("kv")
    query = RangeQuery.with_no_bounds().with_limit(2)
    pages, token = [], None
    while True:
        rows, keys, more = run_query(kv, "kv", query.with_continuation(token))
        result = StateQueryResult("kv", query, {0: QueryResult(0, "0_0", "me", rows, sort_keys=keys, more=more)})
        pages.append([r.key for r in result.records()])
        token = result.continuation
        if token is None:
            break
    assert pages == [["a", "b"], ["c", "d"]]
    descending = RangeQuery.with_range("b", "d").with_descending_keys()
    assert [r.key for r in run_query(kv, "kv", descending)[0]] == ["d", "c", "b"]


def test_range_pages_of_several_partitions_merge_in_key_order():
    query = RangeQuery.with_no_bounds().with_limit(3)
    p0 = QueryResult(0, "0_0", "i", [KeyValue("a", 1), KeyValue("c", 3)], sort_keys=("61", "63"))
    p1 = QueryResult(1, "0_1", "i", [KeyValue("b", 2), KeyValue("d", 4)], sort_keys=("62", "64"))
    result = StateQueryResult("kv", query, {0: p0, 1: p1})
    assert [r.key for r in result.records()] == ["a", "b", "c"]
    assert result.continuation == "63"  # "d" is still to come
    restoring = QueryResult(1, "0_1", "i", failure_reason="restoring", failure="task 0_1 is restoring")
    with pytest.raises(TaskNotAvailableError, match="partition 1 .*restoring") as caught:
        StateQueryResult("kv", query, {0: p0, 1: restoring}).records()
    assert caught.value.reason == "restoring"


def test_a_request_is_checked_against_the_topology_before_any_thread_sees_it():
    topology, config = _topology(), StreamsConfig(application_id="app", bootstrap_servers="x:1")
    counts = {0: 4}
    with pytest.raises(UnknownStoreError, match=r"no store 'nope'.*\['kv', 'sessions', 'versions'\]"):
        resolve_target(topology, config, counts, StateQueryRequest.in_store("nope").with_query(KeyQuery("a")), "i")
    with pytest.raises(InvalidQueryError, match="'sessions' is a session store; a KeyQuery needs a key_value store"):
        resolve_target(topology, config, counts, StateQueryRequest.in_store("sessions").with_query(KeyQuery("a")), "i")
    with pytest.raises(InvalidQueryError, match=r"key 42 does not fit store 'kv'"):
        resolve_target(topology, config, counts, StateQueryRequest.in_store("kv").with_query(KeyQuery(42)), "i")
    with pytest.raises(InvalidQueryError, match=r"partitions 0\.\.3, not \[7\]"):
        resolve_target(topology, config, counts,
                       StateQueryRequest.in_store("kv").with_query(RangeQuery()).with_partitions({1, 7}), "i")
    target = resolve_target(topology, config, counts, StateQueryRequest.in_store("kv").with_query(KeyQuery("a")), "i")
    assert target.partitions == {key_partition(b"a", 4)}
    everything = resolve_target(topology, config, counts,
                                StateQueryRequest.in_store("kv").with_query(RangeQuery()), "i")
    assert everything.partitions == {0, 1, 2, 3}


@pytest.mark.parametrize("bad, message", [
    (lambda: RangeQuery().with_limit(0), "limit must be an int in 1..1000"),
    (lambda: RangeQuery().with_limit(1001), "limit must be an int in 1..1000"),
    (lambda: RangeQuery().with_continuation("zz"), "continuation token must be the hex string"),
    (lambda: VersionedKeyQuery.with_key("a").as_of_timestamp(-1), "as_of must be an epoch-ms int >= 0"),
    (lambda: KeyQuery.with_key(None), "a query key cannot be None"),
    (lambda: StateQueryRequest.in_store(""), "store must be a non-empty store name"),
    (lambda: StateQueryRequest.in_store("kv").with_stale_reads(-1), "max_lag must be an int >= 0"),
    (lambda: StateQueryRequest.in_store("kv").with_query("get a"), "with_query takes a KeyQuery"),
])
def test_bad_queries_name_the_value_and_the_fix(bad, message):
    with pytest.raises(InvalidQueryError, match=message):
        bad()


def test_a_position_bound_needs_every_partition_it_names():
    at = Position.of({("in", 0): 10, ("in", 1): 5})
    assert at.dominates(Position.of({("in", 0): 10}))
    assert not at.dominates(Position.of({("in", 0): 11}))
    assert not at.dominates(Position.of({("in", 2): 0}))  # a partition never seen is not reached
    assert at.dominates(Position.of({("in", 2): 0}), within={("in", 0), ("in", 1)})  # another task's


def test_requests_and_answers_survive_the_wire():
    request = (StateQueryRequest.in_store("kv").with_query(RangeQuery.with_range("a", "c").with_limit(5))
               .with_partitions({1}).with_stale_reads(10)
               .with_position_bound(PositionBound.at(Position.of({("in", 1): 7}))))
    remote = RemoteQuery.new("app", request, 123)
    again = RemoteQuery.from_json_bytes(remote.to_json_bytes())
    assert again == remote
    result = QueryResult(1, "0_1", "i-1", [KeyValue("a", 1)], Position.of({("in", 1): 8}), sort_keys=("61",))
    answer = QueryAnswer(remote.request_id, "i-1", (1,), (result,))
    decoded = QueryAnswer.from_json_bytes(answer.to_json_bytes())
    assert decoded.results[0].result == [{"key": "a", "value": 1}]
    assert decoded.results[0].position == result.position
    for raw, message in [(b"{", "not JSON"), (b'{"format_version": 9}', "format_version 9"),
                         (b'{"format_version": 1, "request_id": "q"}', "needs string request_id")]:
        with pytest.raises(InvalidQueryError, match=message):
            RemoteQuery.from_json_bytes(raw)


def test_answers_become_json_data():
    session = KeyValue(Windowed("a", SessionWindow(1, 5)), 3)
    assert to_json_value([session]) == [{"key": "a", "start": 1, "end": 5, "value": 3}]


def test_the_query_topics_fit_every_accepted_application_id():
    from airflow_stateful_provider.streams import ConfigError
    from airflow_stateful_provider.streams.queries.wire import answers_topic_name, queries_topic_name
    from airflow_stateful_provider.streams.topic_names import topic_name_problem

    longest = "a" * 235
    StreamsConfig(application_id=longest, bootstrap_servers="x:1")
    assert topic_name_problem(answers_topic_name(longest)) is None
    assert topic_name_problem(queries_topic_name(longest)) is None
    with pytest.raises(ConfigError, match="at most 235 fit: the internal topic '<application_id>-query-answers'"):
        StreamsConfig(application_id=longest + "a", bootstrap_servers="x:1")
