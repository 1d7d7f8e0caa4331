"""The versioned key-value store kind (KIP-889): ``VersionedKeyValueStore`` on RocksDB
(rocksdb.py, segment rows in format.py) or in memory (in_memory.py), its changelogging
wrapper and the typed view processors see."""

from airflow_stateful_provider.streams.state.versioned.builder import (
    VersionedBytesStoreSupplier,
    VersionedKeyValueStoreBuilder,
)
from airflow_stateful_provider.streams.state.versioned.changelogging import ChangeloggingVersionedKeyValueStore
from airflow_stateful_provider.streams.state.versioned.in_memory import InMemoryVersionedKeyValueStore
from airflow_stateful_provider.streams.state.versioned.kind import VERSIONED
from airflow_stateful_provider.streams.state.versioned.rocksdb import RocksDBVersionedKeyValueStore
from airflow_stateful_provider.streams.state.versioned.store import (
    NOT_PUT,
    VALID_TO_UNDEFINED,
    VersionedKeyValueStore,
    VersionedRecord,
    versioned_segment_interval,
)
from airflow_stateful_provider.streams.state.versioned.typed import TypedVersionedKeyValueStore

__all__ = [
    "NOT_PUT",
    "VALID_TO_UNDEFINED",
    "VERSIONED",
    "ChangeloggingVersionedKeyValueStore",
    "InMemoryVersionedKeyValueStore",
    "RocksDBVersionedKeyValueStore",
    "TypedVersionedKeyValueStore",
    "VersionedBytesStoreSupplier",
    "VersionedKeyValueStore",
    "VersionedKeyValueStoreBuilder",
    "VersionedRecord",
    "versioned_segment_interval",
]
