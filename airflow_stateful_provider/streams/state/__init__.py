"""State stores: key-value, session and versioned, on RocksDB or in memory.

Stores work on bytes (serdes are applied above them, in the runtime). Persistent
stores live in self-describing directories (``store-metadata.json`` + ``rocksdb/``)
that :func:`open_store` opens without the topology. Changelogging wrappers send
every write to a :class:`ChangelogWriter`; ``restore_batch`` replays a changelog.
See docs/stores.md for layouts and record formats, docs/architecture.md for the folders.

Each kind of store has its folder (keyvalue/, session/, versioned/) and registers its
:class:`StoreKind`; what they share is in common/. This package imports the built-in kinds,
so they are registered as soon as any module of it is imported: a directory of any of them
can be read from anywhere.
"""

from __future__ import annotations

from airflow_stateful_provider.streams.state.common.changelog_records import (
    ChangelogRecord,
    ChangelogWriter,
    ListChangelogWriter,
)
from airflow_stateful_provider.streams.state.common.checkpoint import (
    CHECKPOINT_FILE_NAME,
    OFFSET_UNKNOWN,
    OffsetCheckpoint,
    read_checkpoint,
    write_checkpoint,
)
from airflow_stateful_provider.streams.state.common.kind import StoreKind, register_store_kind, store_kind, store_kinds
from airflow_stateful_provider.streams.state.common.maintenance import (
    CompactionResult,
    RetentionResult,
    SegmentInfo,
    StoreStats,
)
from airflow_stateful_provider.streams.state.common.metadata import (
    FORMAT_VERSION,
    METADATA_FILE_NAME,
    MetadataKind,
    StoreMetadata,
    read_metadata,
)
from airflow_stateful_provider.streams.state.keyvalue import (
    KEY_VALUE,
    ChangeloggingKeyValueStore,
    InMemoryKeyValueStore,
    KeyValueStore,
    RocksDBKeyValueStore,
)
from airflow_stateful_provider.streams.state.session import (
    SESSION,
    ChangeloggingSessionStore,
    InMemorySessionStore,
    RocksDBSessionStore,
    SessionKey,
    SessionStore,
    session_key_from_bytes,
    session_key_to_bytes,
    session_segment_interval,
)
from airflow_stateful_provider.streams.state.store_dir import find_stores, open_store
from airflow_stateful_provider.streams.state.versioned import (
    NOT_PUT,
    VALID_TO_UNDEFINED,
    VERSIONED,
    ChangeloggingVersionedKeyValueStore,
    InMemoryVersionedKeyValueStore,
    RocksDBVersionedKeyValueStore,
    VersionedKeyValueStore,
    VersionedRecord,
    versioned_segment_interval,
)
from airflow_stateful_provider.streams.topic_partition import TopicPartition

__all__ = [
    "CHECKPOINT_FILE_NAME",
    "FORMAT_VERSION",
    "KEY_VALUE",
    "METADATA_FILE_NAME",
    "NOT_PUT",
    "OFFSET_UNKNOWN",
    "SESSION",
    "VALID_TO_UNDEFINED",
    "VERSIONED",
    "ChangelogRecord",
    "ChangelogWriter",
    "ChangeloggingKeyValueStore",
    "ChangeloggingSessionStore",
    "ChangeloggingVersionedKeyValueStore",
    "CompactionResult",
    "InMemoryKeyValueStore",
    "InMemorySessionStore",
    "InMemoryVersionedKeyValueStore",
    "KeyValueStore",
    "ListChangelogWriter",
    "MetadataKind",
    "OffsetCheckpoint",
    "RetentionResult",
    "RocksDBKeyValueStore",
    "RocksDBSessionStore",
    "RocksDBVersionedKeyValueStore",
    "SegmentInfo",
    "SessionKey",
    "SessionStore",
    "StoreKind",
    "StoreMetadata",
    "StoreStats",
    "TopicPartition",
    "VersionedKeyValueStore",
    "VersionedRecord",
    "find_stores",
    "open_store",
    "read_checkpoint",
    "read_metadata",
    "register_store_kind",
    "session_key_from_bytes",
    "session_key_to_bytes",
    "session_segment_interval",
    "store_kind",
    "store_kinds",
    "versioned_segment_interval",
    "write_checkpoint",
]
