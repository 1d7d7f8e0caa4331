"""The example pipeline (airflow_stateful_provider/examples) against its oracle, in the TopologyTestDriver."""

from __future__ import annotations

import logging

import pytest

from airflow_stateful_provider.examples.clicks_and_payments import (
    DEFAULT_SESSION_GAP_MS,
    DEFAULT_SESSION_GRACE_MS,
    ExampleSettings,
    build_topology,
)
from airflow_stateful_provider.examples.expected import (
    expected_late_clicks,
    expected_payments_usd,
    expected_sessions,
    partition_for,
)
from airflow_stateful_provider.examples.generator import CLICK, PAYMENT, RATE, generate, produce
from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import ConfigError, DeserializationError, ProcessingError
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.testing import TopologyTestDriver
from airflow_stateful_provider.streams.windows import SessionWindowedSerde

S, J = Serdes.string(), Serdes.json()
START = 1_750_000_000_000  # fixed, so the data set is the same on every run
RECORDS = generate(seed=7, start_ms=START)


@pytest.fixture(autouse=True)
def _quiet_late_record_warnings(caplog):
    caplog.set_level(logging.ERROR, logger="airflow_stateful_provider.streams.dsl")


def _config(**app_configs) -> StreamsConfig:
    # emission of closed sessions is throttled by wall-clock time, which stands still in the driver
    return StreamsConfig(application_id="example", bootstrap_servers="unused:9092",
                         windowed_aggregation_emit_interval_ms=0, app_configs=app_configs)


def _run(records, config: StreamsConfig, store_type: str = "in_memory"):
    settings = ExampleSettings.from_app_configs(config.app_configs)
    with TopologyTestDriver(build_topology(config), config, store_type=store_type) as driver:
        inputs = {CLICK: driver.create_input_topic(settings.clicks_topic, S, J),
                  PAYMENT: driver.create_input_topic(settings.payments_topic, S, J),
                  RATE: driver.create_input_topic(settings.rates_topic, S, J)}
        for record in records:
            inputs[record.kind].pipe_input(record.key, record.value, record.timestamp)
        session_records = driver.create_output_topic(
            settings.sessions_topic, SessionWindowedSerde(S), J).read_records_to_list()
        payments = driver.create_output_topic(settings.payments_usd_topic, S, J).read_key_values_to_map()
        return session_records, payments, driver.metrics()


def _sessions(session_records):
    return {(r.key.key, r.key.window.start, r.key.window.end): r.value for r in session_records}


# RocksDB commits (and syncs) after every piped record: a smaller data set keeps it quick
@pytest.mark.parametrize("store_type, records", [
    ("in_memory", RECORDS),
    ("rocksdb", generate(seed=8, users=30, clicks=800, payments=150, start_ms=START)),
], ids=["in_memory", "rocksdb"])
def test_topology_outputs_exactly_what_the_oracle_expects(store_type, records):
    session_records, payments, metrics = _run(records, _config(), store_type)

    expected = expected_sessions(records)
    assert _sessions(session_records) == expected
    # on window close: each session once, final, never a tombstone
    assert len(session_records) == len(expected) and all(r.value is not None for r in session_records)
    assert all(r.timestamp == r.key.window.end for r in session_records)
    assert payments == expected_payments_usd(records)
    assert metrics["dropped-records-total:late"] == expected_late_clicks(records) > 0


def test_the_data_set_holds_the_cases_that_matter():
    clicks = [r for r in RECORDS if r.kind == CLICK]
    sent_after_a_later_click = sum(
        1 for i, r in enumerate(clicks) if any(o.timestamp > r.timestamp for o in clicks[max(0, i - 50):i]))
    late = expected_late_clicks(RECORDS)
    assert sent_after_a_later_click > late > 10  # out of order: some accepted within grace, some dropped
    sessions = expected_sessions(RECORDS)
    assert any(s["clicks"] > 1 for s in sessions.values()) and any(s["clicks"] == 1 for s in sessions.values())
    flush = max(r.timestamp for r in clicks)
    assert all(s["end"] < flush for s in sessions.values()), "a flush click's session was emitted"

    priced = expected_payments_usd(RECORDS)
    assert len(priced) == sum(r.kind == PAYMENT for r in RECORDS)
    unpriced = [p for p in priced.values() if p["rate"] is None]
    assert 0 < len(unpriced) < len(priced) / 4  # payments before their currency's first rate
    rates_used = {(p["currency"], p["rate_ts"]) for p in priced.values() if p["rate"] is not None}
    assert len(rates_used) > 40  # rates change between payments
    assert any(p["rate_ts"] == p["ts"] for p in priced.values())  # a rate valid from exactly the payment time
    first = RECORDS.index(next(r for r in RECORDS if r.kind != RATE))
    assert all(r.kind == RATE for r in RECORDS[:first]) and all(r.kind != RATE for r in RECORDS[first:])


def test_generator_is_deterministic_by_seed_and_uses_event_time_as_record_time():
    assert generate(seed=3, users=20, clicks=500, payments=50, start_ms=START) == \
        generate(seed=3, users=20, clicks=500, payments=50, start_ms=START)
    assert generate(seed=3, users=20, clicks=500, payments=50, start_ms=START) != \
        generate(seed=4, users=20, clicks=500, payments=50, start_ms=START)
    assert all(r.timestamp == r.value["ts"] for r in RECORDS)
    assert sum(r.kind == CLICK for r in RECORDS) == 3000 + 100  # plus one flush click per user
    assert all(r.timestamp >= START - 60_000 for r in RECORDS)
    now = 1_760_000_123_456
    recent = generate(seed=7, now_ms=now)  # start_ms None: the same data, ending 30 minutes before now
    assert recent[0].timestamp % 60_000 == 0  # the first rate, a minute before the start
    shift = recent[0].timestamp - RECORDS[0].timestamp
    assert [(r.key, r.timestamp - shift) for r in recent] == [(r.key, r.timestamp) for r in RECORDS]
    assert now - 31 * 60_000 < max(r.timestamp for r in recent) <= now - 30 * 60_000
    with pytest.raises(ValueError, match="users must be an int >= 1, got 0"):
        generate(users=0, start_ms=START)
    with pytest.raises(ValueError, match=r"currencies must be distinct codes.*\['EUR', 'EUR'\]"):
        generate(currencies=("EUR", "EUR"), start_ms=START)


def test_produce_refuses_timestamps_the_broker_would_delete_or_reject():
    old = generate(seed=1, users=2, clicks=5, payments=1, start_ms=START)
    with pytest.raises(ValueError, match=r"record timestamp 17499\d+ of \w+ .* not within 6 days before"):
        produce("unused:9092", old, now_ms=START + 30 * 24 * 3_600_000)


def test_settings_come_from_app_configs_with_documented_defaults():
    defaults = ExampleSettings.from_app_configs({"unrelated": 1})
    assert (defaults.input_topics, defaults.output_topics) == (
        ("clicks", "payments", "currency-rates"), ("user-sessions", "payments-usd"))
    assert (defaults.session_gap_ms, defaults.session_grace_ms) == (1_800_000, 300_000)
    assert defaults.sessions_retention_ms == defaults.rates_history_retention_ms == 86_400_000
    from datetime import timedelta
    assert ExampleSettings.from_app_configs({"session_gap_ms": timedelta(minutes=10)}).session_gap_ms == 600_000
    with pytest.raises(ConfigError, match=r"app_configs\['session_gap_ms'\]"):
        ExampleSettings.from_app_configs({"session_gap_ms": 0})
    with pytest.raises(ConfigError, match=r"app_configs\['clicks_topic'\] must be a non-empty topic name, got ''"):
        ExampleSettings.from_app_configs({"clicks_topic": ""})
    with pytest.raises(ConfigError, match=r"sessions_retention_ms'\] \(60000\) must be at least"):
        ExampleSettings.from_app_configs({"sessions_retention_ms": 60_000})


def test_overridden_topics_and_windows_are_used():
    gap, grace = 10 * 60_000, 60_000
    records = generate(seed=11, users=30, clicks=800, payments=100, start_ms=START,
                       session_gap_ms=gap, session_grace_ms=grace)
    config = _config(clicks_topic="c", payments_topic="p", rates_topic="r", sessions_topic="s",
                     payments_usd_topic="u", session_gap_ms=gap, session_grace_ms=grace,
                     rates_history_retention_ms=3_600_000)
    topology = build_topology(config).describe()
    assert "topics: [c]" in str(topology) and "(topic: u)" in str(topology)
    session_records, payments, _ = _run(records, config)
    assert _sessions(session_records) == expected_sessions(records, gap, grace)
    assert _sessions(session_records) != expected_sessions(records)  # the default gap would give other sessions
    # an hour of rate history: payments older than the newest rate minus an hour get only the newest rate
    assert payments == expected_payments_usd(records, history_retention_ms=3_600_000)
    assert payments != expected_payments_usd(records)


def test_malformed_json_follows_the_configured_deserialization_handler():
    records = generate(seed=5, users=10, clicks=200, payments=30, start_ms=START)
    topology_config = _config()
    with TopologyTestDriver(build_topology(topology_config), topology_config) as driver:
        raw = driver.create_input_topic("clicks", S, Serdes.bytes())
        with pytest.raises(DeserializationError, match="topic 'clicks' partition 0 offset 0"):
            raw.pipe_input("user-000", b"{not json", START)

    config = StreamsConfig.from_mapping({**_config().to_dict(),
                                         "deserialization_exception_handler": "log_and_continue"})
    settings = ExampleSettings()
    with TopologyTestDriver(build_topology(config), config) as driver:
        inputs = {CLICK: driver.create_input_topic("clicks", S, J),
                  PAYMENT: driver.create_input_topic("payments", S, J),
                  RATE: driver.create_input_topic("currency-rates", S, J)}
        raw_payments = driver.create_input_topic(settings.payments_topic, S, Serdes.bytes())
        for i, record in enumerate(records):
            if i == len(records) // 2:
                raw_payments.pipe_input("user-001", b'{"payment_id": ', record.timestamp)
            inputs[record.kind].pipe_input(record.key, record.value, record.timestamp)
        payments = driver.create_output_topic("payments-usd", S, J).read_key_values_to_map()
        assert driver.metrics()["dropped-records-total:deserialization"] == 1
    assert payments == expected_payments_usd(records)


def test_a_payment_without_a_currency_fails_naming_the_field_and_the_value():
    config = _config()
    with TopologyTestDriver(build_topology(config), config) as driver:
        payments = driver.create_input_topic("payments", S, J)
        with pytest.raises(ProcessingError) as failure:
            payments.pipe_input("user-001", {"payment_id": "pay-1", "amount": 3.5, "ts": START}, START)
    assert "needs a 'currency' field of type str, got {'payment_id': 'pay-1'" in str(failure.value.__cause__)


def test_partition_for_matches_the_default_partitioner():
    from kafka.partitioner.default import DefaultPartitioner

    class Cluster:
        def topics(self):
            return {"t"}

        def partitions_for_topic(self, topic):
            return {0, 1, 2, 3}

        def available_partitions_for_topic(self, topic):
            return {0, 1, 2, 3}

    keys = [f"user-{i:03d}" for i in range(50)] + ["EUR", "GBP", "JPY", "CHF"]
    assert [partition_for(k, 4) for k in keys] == \
        [DefaultPartitioner().partition("t", k, k.encode(), None, None, Cluster()) for k in keys]
    assert len({partition_for(k, 4) for k in keys}) == 4


def test_default_session_retention_emits_every_closed_session():
    """With the DSL's default session retention (gap + grace) the put that advances stream
    time drops store segments holding just-closed sessions; they are forwarded before it."""
    retention = DEFAULT_SESSION_GAP_MS + DEFAULT_SESSION_GRACE_MS
    session_records, _, _ = _run(RECORDS, _config(sessions_retention_ms=retention))
    assert _sessions(session_records) == expected_sessions(RECORDS)
