"""The instance's RocksDB memory budget and the user's config setter (state/common/rocksdb_memory.py)."""

from __future__ import annotations

import os
import sys
import types

import pytest
import rocksdict

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed
from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreams
from airflow_stateful_provider.streams.instance.stream_thread import StreamThread
from airflow_stateful_provider.streams.serdes import Serdes
from airflow_stateful_provider.streams.state.common.rocksdb_memory import RocksDBMemory
from airflow_stateful_provider.streams.state.keyvalue.rocksdb import RocksDBKeyValueStore
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.testing import TopologyTestDriver

S = Serdes.string()
MiB = 1 << 20


def test_defaults_are_documented_values():
    config = StreamsConfig("app", "h:1")
    assert (config.rocksdb_memory_bytes, config.rocksdb_write_buffer_bytes) == (128 * MiB, 32 * MiB)
    assert config.rocksdb_config_setter is None


@pytest.mark.parametrize(("values", "message"), [
    ({"rocksdb_memory_bytes": 1000}, r"rocksdb_memory_bytes must be at least 4194304 bytes \(4 MiB\), got 1000"),
    ({"rocksdb_memory_bytes": "128MB"}, r"rocksdb_memory_bytes must be an int \(bytes\), got str '128MB'"),
    ({"rocksdb_write_buffer_bytes": True}, r"rocksdb_write_buffer_bytes must be an int \(bytes\), got bool True"),
    ({"rocksdb_memory_bytes": 16 * MiB, "rocksdb_write_buffer_bytes": 32 * MiB},
     r"rocksdb_write_buffer_bytes \(33554432\) must not exceed rocksdb_memory_bytes \(16777216\)"),
    ({"rocksdb_config_setter": "my_module.setter"},
     "rocksdb_config_setter must be a callable .* or an import path 'package.module:function', "
     "got 'my_module.setter'"),
    ({"rocksdb_config_setter": 42}, "rocksdb_config_setter must be a callable .* got 42"),
])
def test_bad_settings_are_refused_naming_the_value(values, message):
    with pytest.raises(ConfigError, match=message):
        StreamsConfig("app", "h:1", **values)


def test_an_import_path_that_does_not_resolve_is_refused_when_the_budget_is_made():
    config = StreamsConfig("app", "h:1", rocksdb_config_setter="no_such_module_xyz:setter")
    with pytest.raises(ConfigError, match="rocksdb_config_setter 'no_such_module_xyz:setter': cannot import"):
        RocksDBMemory.for_config(config)
    with pytest.raises(ConfigError, match="module 'os' has no callable 'no_such_attribute'"):
        RocksDBMemory(8 * MiB, 2 * MiB, "os:no_such_attribute")


def _three_tables():
    builder = StreamsBuilder()
    for name in ("a", "b", "c"):
        builder.table(name, Consumed.with_(S, S), Materialized.as_(f"{name}-store"))
    return builder.build()


def test_the_config_setter_sees_every_store_by_name_and_its_options_apply(monkeypatch):
    seen: list[tuple[str, type]] = []

    def setter(store_name, options):
        seen.append((store_name, type(options)))
        options.set_keep_log_file_num(1)

    module = types.ModuleType("rocksdb_setters_for_test")
    module.setter = setter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    config = {"rocksdb_config_setter": f"{module.__name__}:setter"}
    with TopologyTestDriver(_three_tables(), config, store_type="rocksdb") as driver:
        driver.create_input_topic("b", S, S).pipe_input("k", "v", 1)
        assert driver.get_key_value_store("b-store").get("k") == "v"
        kv_dir = os.path.join(driver.config.state_dir, "topology-test-driver", "0_0")
        # the OPTIONS file RocksDB writes holds what the setter set
        rocks_dirs = [root for root, _dirs, files in os.walk(kv_dir) if "CURRENT" in files]
        options_files = [os.path.join(d, f) for d in rocks_dirs for f in os.listdir(d) if f.startswith("OPTIONS-")]
        assert options_files and all("keep_log_file_num=1" in open(f).read() for f in options_files)
    # opened once to create it, once to use it
    assert sorted({name for name, _ in seen}) == ["a-store", "b-store", "c-store"]
    assert {kind for _, kind in seen} == {rocksdict.Options}


def test_a_failing_setter_is_a_config_error_naming_it_and_the_store(tmp_path):
    def refuse(store_name, options):
        raise ValueError("no compaction style for you")

    memory = RocksDBMemory(8 * MiB, 2 * MiB, refuse)
    with pytest.raises(ConfigError, match=r"rocksdb_config_setter .*refuse failed for store 'counts': "
                                          r"ValueError: no compaction style for you"):
        RocksDBKeyValueStore(tmp_path / "counts", rocksdb_memory=memory)
    assert not (tmp_path / "counts").exists()  # nothing half-created


def test_all_stores_charge_their_memtables_to_the_one_shared_cache(tmp_path):
    """The manager counts the memtables of every store opened with the budget, and charges
    them to the block cache: the cache's capacity bounds both (docs/configuration.md)."""
    memory = RocksDBMemory(8 * MiB, 2 * MiB)
    first, second = (RocksDBKeyValueStore(tmp_path / name, rocksdb_memory=memory) for name in ("x", "y"))
    # ~220 KB per store: under a store's write buffer (a quarter of 2 MiB), so no memtable is
    # switched and flushed in the background, which would free memory at a moment of its own
    for i in range(1_000):
        first.put(b"key-%08d" % i, b"v" * 200)
    one_store = memory.usage()["memtable_bytes"]
    for i in range(1_000):
        second.put(b"key-%08d" % i, b"v" * 200)
    usage = memory.usage()
    assert 0 < one_store < usage["memtable_bytes"] <= usage["cache_bytes"]
    assert second.get(b"key-%08d" % 734) == b"v" * 200
    first.close()
    second.close()


def test_an_instance_hands_its_one_budget_to_the_stores_of_its_threads(tmp_path):
    builder = StreamsBuilder()
    builder.table("t", Consumed.with_(S, S), Materialized.as_("kv"))
    topology = builder.build()
    config = StreamsConfig("app", "localhost:9092", state_dir=str(tmp_path), rocksdb_memory_bytes=8 * MiB,
                           rocksdb_write_buffer_bytes=2 * MiB)
    streams = KafkaStreams(topology, config)
    memory = streams.rocksdb_memory
    assert (memory.memory_bytes, memory.write_buffer_bytes) == (8 * MiB, 2 * MiB)
    thread = StreamThread(1, topology, config, client_id="c", consumer_factory=lambda **_: None,
                          producer_factory=lambda **_: None, rocksdb_memory=memory)
    _collector, stores = thread.task_manager._new_stores(TaskId(0, 0))
    stores.initialize()
    stores.raw_store("kv").put(b"k", b"v")
    assert memory.usage()["memtable_bytes"] > 0  # the store's memtable is counted in the instance's budget
    stores.close()


def test_an_instance_whose_setter_cannot_be_imported_is_refused_when_created(tmp_path):
    config = StreamsConfig("app", "localhost:9092", state_dir=str(tmp_path),
                           rocksdb_config_setter="no_such_module_xyz:tune")
    with pytest.raises(ConfigError, match="rocksdb_config_setter 'no_such_module_xyz:tune': cannot import"):
        KafkaStreams(_three_tables(), config)


def _current_options(store_dir) -> str:
    """The newest OPTIONS file RocksDB wrote for the store (SetOptions writes a new one)."""
    rocks_dir = os.path.join(store_dir, "rocksdb")
    newest = max((f for f in os.listdir(rocks_dir) if f.startswith("OPTIONS-")), key=lambda f: int(f.split("-")[1]))
    return open(os.path.join(rocks_dir, newest)).read()


def _memtable_filter(store_dir) -> tuple[str, str]:
    lines = {line.strip().split("=")[0]: line.strip().split("=")[1] for line in _current_options(store_dir).splitlines()
             if line.strip().startswith(("memtable_whole_key_filtering=", "memtable_prefix_bloom_size_ratio="))}
    return lines["memtable_whole_key_filtering"], lines["memtable_prefix_bloom_size_ratio"]


def test_a_store_restores_without_its_memtable_filter_and_its_task_reads_with_it(tmp_path):
    """Nothing reads a restoring store: its writes skip the memtable filter's inserts; once
    the task processes, the filter is back (as RocksDB's own OPTIONS file says)."""
    from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
    from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
    from airflow_stateful_provider.streams.state import ChangelogRecord

    config = StreamsConfig("app", "h:1", state_dir=str(tmp_path))
    task = TaskId(0, 0)
    stores = TaskStateManager(task, _three_tables(), config, record_collector=RecordCollector(None, task_id=task))
    stores.initialize()
    try:
        store = stores.raw_store("a-store")
        store_dir = store.path
        assert _memtable_filter(store_dir) == ("true", "0.100000")
        changelog = stores.changelog_partitions()["a-store"]
        assert stores.restore(changelog, [ChangelogRecord(b"k%d" % i, b"v", 0, i) for i in range(100)]) == 100
        assert _memtable_filter(store_dir) == ("false", "0.000000")
        stores.begin_processing()
        assert _memtable_filter(store_dir) == ("true", "0.100000")
        assert store.get(b"k42") == b"v" and store.get(b"x") is None
        stores.begin_processing()  # again (a task resumed): nothing to change
        assert _memtable_filter(store_dir) == ("true", "0.100000")
    finally:
        stores.close()


def test_with_a_config_setter_the_memtable_filter_stays_as_the_setter_made_it(tmp_path):
    def setter(store_name, options):
        options.set_memtable_prefix_bloom_ratio(0.2)

    store = RocksDBKeyValueStore(tmp_path / "counts", rocksdb_memory=RocksDBMemory(8 * MiB, 2 * MiB, setter))
    try:
        from airflow_stateful_provider.streams.state import ChangelogRecord

        store.restore_batch([ChangelogRecord(b"k", b"v", 0, 0)])
        assert _memtable_filter(store.path) == ("true", "0.200000")
        store.end_restoration()
        assert _memtable_filter(store.path) == ("true", "0.200000") and store.get(b"k") == b"v"
    finally:
        store.close()
