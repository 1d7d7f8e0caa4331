"""Topologies the integration tests run in separate instance processes
(``python -m airflow_stateful_provider.streams.runner --topology tests.integration.topologies:NAME``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Grouped, Produced
from airflow_stateful_provider.streams.windows import SessionWindows

#: Inactivity gap of the click sessions: 5 minutes of synthetic event time.
SESSION_GAP_MS = 300_000


def session_counts(gap_ms: int = SESSION_GAP_MS, store: str = "click-sessions", sink: str = "sessions",
                   ) -> StreamsBuilder:
    """Clicks keyed by user -> count per session -> ``sink`` keyed "user@start-end"
    (a None value retracts a session that was merged into a larger one)."""
    builder = StreamsBuilder()
    (builder.stream("clicks", Consumed.with_("string", "string"))
     .group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(gap_ms))
     .count(Materialized.as_(store))
     .to_stream()
     .map(lambda windowed, count: (f"{windowed.key}@{windowed.window.start}-{windowed.window.end}", count))
     .to(sink, Produced.with_("string", "int64")))
    return builder


def session_counts_oracle(clicks: Iterable[tuple[str, int]], gap_ms: int = SESSION_GAP_MS,
                          ) -> dict[tuple[str, int, int], int]:
    """What :func:`session_counts` must end with for ``clicks`` ((user, timestamp), any
    order): the clicks per (user, session start, session end)."""
    by_user: dict[str, list[int]] = defaultdict(list)
    for user, ts in clicks:
        by_user[user].append(ts)
    sessions = {}
    for user, stamps in by_user.items():
        stamps.sort()
        start = prev = stamps[0]
        count = 0
        for ts in stamps:
            if ts - prev > gap_ms:
                sessions[(user, start, prev)] = count
                start, count = ts, 0
            prev = ts
            count += 1
        sessions[(user, start, prev)] = count
    return sessions


def json_counts(input_topic: str, output_topic: str, store: str = "counts"):
    """JSON values counted per key into a persistent key-value store; each new count is
    sent to ``output_topic`` (string key, int64 count)."""
    from airflow_stateful_provider.streams.processor import Processor
    from airflow_stateful_provider.streams.topology.store_builders import Stores
    from airflow_stateful_provider.streams.topology.topology import Topology

    class Count(Processor):
        def init(self, context):
            self.context = context
            self.counts = context.get_state_store(store)

        def process(self, record):
            count = (self.counts.get(record.key) or 0) + 1
            self.counts.put(record.key, count)
            self.context.forward(record.with_value(count))

    topology = Topology()
    topology.add_source("source", input_topic, key_serde="string", value_serde="json")
    topology.add_processor("count", Count, "source")
    topology.add_state_store(
        Stores.key_value_store_builder(Stores.persistent_key_value_store(store), "string", "int64"), "count")
    topology.add_sink("sink", output_topic, "count", key_serde="string", value_serde="int64")
    return topology


def regrouped_counts(input_topic: str, output_topic: str) -> StreamsBuilder:
    """Values re-keyed by their first letter (through a repartition topic), then counted."""
    builder = StreamsBuilder()
    (builder.stream(input_topic, Consumed.with_("string", "string"))
     .group_by(lambda key, value: value[:1], Grouped.with_("string", "string"))
     .count(Materialized.as_("letter-counts"))
     .to_stream()
     .to(output_topic, Produced.with_("string", "int64")))
    return builder


def failover_counts():
    """JSON values counted per key (topics failover-in -> failover-out)."""
    return json_counts("failover-in", "failover-out")


def configured_counts(config):
    """JSON values counted per key; topics from the config's ``app_configs`` ("input", "output")."""
    return json_counts(config.app_configs["input"], config.app_configs["output"])


def counter_kind_counts(config):
    """Records counted per key in a store of the test-only counter kind (tests/counter_kind/,
    store "counts"); each new total is sent to the output. Topics from ``app_configs``."""
    from airflow_stateful_provider.streams.processor import Processor
    from airflow_stateful_provider.streams.topology.topology import Topology
    from tests.counter_kind import counter_store

    class Count(Processor):
        def init(self, context):
            self.context = context
            self.counts = context.get_state_store("counts")

        def process(self, record):
            self.context.forward(record.with_value(self.counts.add(record.key)))

    topology = Topology()
    topology.add_source("source", config.app_configs["input"], key_serde="string", value_serde="string")
    topology.add_processor("count", Count, "source")
    topology.add_state_store(counter_store("counts", "string"), "count")
    topology.add_sink("sink", config.app_configs["output"], "count", key_serde="string", value_serde="int64")
    return topology


def ttl_profiles(config) -> StreamsBuilder:
    """A table of profiles (string values) whose keys expire an hour of stream time after
    their last update (``Materialized.with_time_to_live``); every update and every expiry (a
    tombstone) goes to the output. Topics from ``app_configs`` ("input", "output")."""
    from datetime import timedelta

    builder = StreamsBuilder()
    table = builder.table(config.app_configs["input"], Consumed.with_("string", "string"),
                          Materialized.as_("profiles").with_time_to_live(timedelta(hours=1)))
    table.to_stream().to(config.app_configs["output"], Produced.with_("string", "string"))
    return builder
