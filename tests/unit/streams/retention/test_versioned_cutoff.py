"""A versioned table after a maintenance run, through the TopologyTestDriver: as-of reads
(a temporal join) answer the same on the maintained instance and on one restored from the
changelog, and a version older than history retention as of the cut-off is dropped as
expired on both (docs/semantics.md §5, docs/maintenance.md "The cut-off")."""

from __future__ import annotations

from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed, Produced
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.state.common.cutoff import VERSIONED_CUTOFF_KEY, decode_cutoff
from airflow_stateful_provider.streams.testing import TopologyTestDriver

S = Serdes.string()
HOUR = 3_600_000
T = 1_700_000_000_000
NOW = T + 72 * HOUR


def join_topology():
    builder = StreamsBuilder()
    rates = Materialized.as_versioned("rates-store", history_retention=HOUR)
    table = builder.table("rates", Consumed.with_(S, S), rates)
    orders = builder.stream("orders", Consumed.with_(S, S))
    orders.join(table, lambda o, r: f"{o}@{r}").to("joined", Produced.with_(S, S))
    return builder.build()


class Instance:
    def __init__(self, store_type, changelogs=None):
        self.driver = TopologyTestDriver(join_topology(), store_type=store_type, changelogs=changelogs)
        self.orders = self.driver.create_input_topic("orders", S, S)
        self.rates = self.driver.create_input_topic("rates", S, S)
        self.joined = self.driver.create_output_topic("joined", S, S)

    def join(self, ts):
        self.orders.pipe_input("k", "order", ts)
        return [(r.value, r.timestamp) for r in self.joined.read_records_to_list()]

    def as_of(self, ts):
        found = self.driver.get_versioned_key_value_store("rates-store").get("k", ts)
        return None if found is None else (found.value, found.timestamp, found.valid_to)


def test_without_maintenance_the_old_version_answers(instances):
    a = instances()
    a.rates.pipe_input("k", "r0", T)
    a.rates.pipe_input("k", "r1", T + 10)
    assert a.join(T + 5) == [("order@r0", T + 5)]


def test_as_of_reads_and_late_versions_agree_on_maintained_and_restored_instances(instances):
    a = instances()
    a.rates.pipe_input("k", "r0", T)
    a.rates.pipe_input("k", "r1", T + 10)
    result = a.driver.enforce_retention(NOW)[0]["result"]
    assert result["cutoff_ms"] == NOW and result["changelog_records_written"] == 1
    changelog = a.driver.changelog_records("rates-store")
    assert changelog[-1].key == VERSIONED_CUTOFF_KEY and decode_cutoff(changelog[-1]) == NOW
    b = instances(changelogs={"rates-store": changelog})
    for instance in (a, b):
        # beyond history retention as of the cut-off only the newest version may answer
        assert instance.as_of(T + 5) is None
        assert instance.as_of(T + 11) == ("r1", T + 10, None)
        assert instance.join(T + 5) == []
        assert instance.join(T + 11) == [("order@r1", T + 11)]
        instance.rates.pipe_input("k", "late", T + 20)  # older than NOW - HR: expired
        assert instance.driver.metrics().get("dropped-records-total:expired", 0) == 1
        assert instance.as_of(NOW) == ("r1", T + 10, None)
