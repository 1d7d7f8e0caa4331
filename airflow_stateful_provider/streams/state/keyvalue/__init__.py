"""The key-value store kind: ``KeyValueStore`` on RocksDB (rocksdb.py) or in memory
(in_memory.py), its changelogging wrapper and the typed view processors see."""

from airflow_stateful_provider.streams.state.keyvalue.builder import KeyValueBytesStoreSupplier, KeyValueStoreBuilder
from airflow_stateful_provider.streams.state.keyvalue.changelogging import ChangeloggingKeyValueStore
from airflow_stateful_provider.streams.state.keyvalue.in_memory import InMemoryKeyValueStore
from airflow_stateful_provider.streams.state.keyvalue.kind import KEY_VALUE
from airflow_stateful_provider.streams.state.keyvalue.rocksdb import RocksDBKeyValueStore
from airflow_stateful_provider.streams.state.keyvalue.store import KeyValueStore
from airflow_stateful_provider.streams.state.keyvalue.typed import TypedKeyValueStore

__all__ = [
    "KEY_VALUE",
    "ChangeloggingKeyValueStore",
    "InMemoryKeyValueStore",
    "KeyValueBytesStoreSupplier",
    "KeyValueStore",
    "KeyValueStoreBuilder",
    "RocksDBKeyValueStore",
    "TypedKeyValueStore",
]
