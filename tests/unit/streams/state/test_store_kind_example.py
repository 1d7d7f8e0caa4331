"""A fourth store kind added as one folder (tests/counter_kind/): a topology uses it through
the TopologyTestDriver on either implementation, its changelog restores it, and the tools
that start from a directory (open_store, find_stores, maintenance) find it through the
registry. The engine does not name it anywhere (on the broker: test_store_kind_example.py
in tests/integration)."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams import StreamsConfig, TopologyTestDriver, open_store
from airflow_stateful_provider.streams.errors import InvalidRecordError, StreamsError
from airflow_stateful_provider.streams.processor import Processor
from airflow_stateful_provider.streams.state import find_stores, read_metadata, store_kind
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogRecord
from airflow_stateful_provider.streams.state.common.kind import maintainable_store_types
from airflow_stateful_provider.streams.topology.topology import Topology
from tests.counter_kind import COUNTER, TypedCounterStore, counter_store
from tests.counter_kind.stores import TOTAL, InMemoryCounterStore, RocksDBCounterStore

APP = "counter-kind"
STORE = "clicks-per-user"
CHANGELOG = f"{APP}-{STORE}-changelog"
CLICKS = [("alice", "a"), ("bob", "b"), ("alice", "c"), ("carol", "d"), ("alice", "e"), ("bob", "f")]


class CountClicks(Processor):
    def init(self, context):
        self.context = context
        self.counts = context.get_state_store(STORE)

    def process(self, record):
        self.context.forward(record.with_value(self.counts.add(record.key)))


def clicks_per_user() -> Topology:
    topology = Topology()
    topology.add_source("clicks", "clicks", key_serde="string", value_serde="string")
    topology.add_processor("count", CountClicks, "clicks")
    topology.add_state_store(counter_store(STORE, "string"), "count")
    topology.add_sink("totals", "totals", "count", key_serde="string", value_serde="int64")
    return topology


@pytest.fixture(params=["in_memory", "rocksdb"])
def driver(request, tmp_path):
    config = StreamsConfig(application_id=APP, bootstrap_servers="unused:9092", state_dir=str(tmp_path))
    with TopologyTestDriver(clicks_per_user(), config, store_type=request.param) as driver:
        driver.create_input_topic("clicks", "string", "string").pipe_key_value_list(CLICKS)
        yield driver


def test_a_topology_counts_with_it_and_logs_every_total(driver):
    assert [(kv.key, kv.value) for kv in driver.create_output_topic("totals", "string", "int64")
            .read_key_values_to_list()] == [("alice", 1), ("bob", 1), ("alice", 2), ("carol", 1), ("alice", 3),
                                            ("bob", 2)]
    store = driver.get_state_store(STORE)
    implementation = RocksDBCounterStore if driver.tasks[0].stores.raw_store(STORE).persistent else InMemoryCounterStore
    assert isinstance(store, TypedCounterStore) and isinstance(store.inner.inner, implementation)
    assert dict(store.all()) == {"alice": 3, "bob": 2, "carol": 1}
    assert driver.tasks[0].stores.kind(STORE) == "counter"
    changelog = driver.create_output_topic(CHANGELOG, "string", "bytes").read_key_values_to_list()
    assert [(kv.key, TOTAL.unpack(kv.value)[0]) for kv in changelog] == [
        ("alice", 1), ("bob", 1), ("alice", 2), ("carol", 1), ("alice", 3), ("bob", 2)]


@pytest.mark.parametrize("implementation", ["rocksdb", "in_memory"])
def test_its_changelog_restores_it(driver, implementation, tmp_path):
    changelog = driver.create_output_topic(CHANGELOG, "bytes", "bytes").read_records_to_list()
    records = [ChangelogRecord(r.key, r.value, r.timestamp, offset) for offset, r in enumerate(changelog)]
    records.insert(2, ChangelogRecord(None, TOTAL.pack(99), 0, -1))  # a null key is skipped
    records.append(ChangelogRecord(b"carol", None, 0, 7))  # a tombstone deletes
    store = RocksDBCounterStore(tmp_path / "restored") if implementation == "rocksdb" else InMemoryCounterStore("r")
    with store:
        assert store.restore_batch(records) == 7
        assert dict(store.all()) == {b"alice": 3, b"bob": 2}
        with pytest.raises(InvalidRecordError, match="offset 8 needs a bytes key and an 8-byte total"):
            store.restore_batch([ChangelogRecord(b"dave", b"12", 0, 8)])
        assert dict(store.all()) == {b"alice": 3, b"bob": 2}


def test_the_tools_find_its_directories_through_the_registry(tmp_path):
    with RocksDBCounterStore(tmp_path / "app" / "0_0" / STORE, name=STORE, key_serde="string") as store:
        store.add(b"alice", 5)
    assert find_stores(tmp_path) == [str(tmp_path / "app" / "0_0" / STORE)]
    assert read_metadata(tmp_path / "app" / "0_0" / STORE).store_type == "counter"
    assert store_kind("counter") is COUNTER
    with open_store(tmp_path / "app" / "0_0" / STORE, read_only=True, expected_type="counter") as opened:
        assert isinstance(opened, RocksDBCounterStore) and opened.metadata.key_serde == "string"
        assert dict(opened.all()) == {b"alice": 5}
    assert "counter" not in maintainable_store_types()  # retention and compaction skip it


def test_a_store_builder_of_no_kind_is_refused_naming_the_store(tmp_path):
    class HandMade:  # what add_state_store accepts (a name), but no builder of any kind
        name = STORE
        key_serde = value_serde = None

    topology = Topology()
    topology.add_source("clicks", "clicks", key_serde="string", value_serde="string")
    topology.add_processor("count", CountClicks, "clicks")
    topology.add_state_store(HandMade(), "count")
    config = StreamsConfig(application_id=APP, bootstrap_servers="unused:9092", state_dir=str(tmp_path))
    with pytest.raises(StreamsError, match=f"store '{STORE}': unsupported store builder HandMade; build it with "
                                           "Stores.key_value_store_builder"):
        TopologyTestDriver(topology, config)
