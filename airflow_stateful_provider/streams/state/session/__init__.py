"""The session store kind (KIP-94): ``SessionStore`` on RocksDB (rocksdb.py) or in memory
(in_memory.py), with its time index (index.py), the ``SessionKey`` they speak in (key.py),
the record cache DSL aggregations put in front (caching.py), its changelogging wrapper and
the typed view processors see."""

from airflow_stateful_provider.streams.state.session.builder import SessionBytesStoreSupplier, SessionStoreBuilder
from airflow_stateful_provider.streams.state.session.caching import CachingSessionStore
from airflow_stateful_provider.streams.state.session.changelogging import ChangeloggingSessionStore
from airflow_stateful_provider.streams.state.session.in_memory import InMemorySessionStore
from airflow_stateful_provider.streams.state.session.key import SessionKey, session_key_from_bytes, session_key_to_bytes
from airflow_stateful_provider.streams.state.session.kind import SESSION
from airflow_stateful_provider.streams.state.session.rocksdb import RocksDBSessionStore
from airflow_stateful_provider.streams.state.session.store import SessionStore, session_segment_interval
from airflow_stateful_provider.streams.state.session.typed import TypedSessionStore

__all__ = [
    "SESSION",
    "CachingSessionStore",
    "ChangeloggingSessionStore",
    "InMemorySessionStore",
    "RocksDBSessionStore",
    "SessionBytesStoreSupplier",
    "SessionKey",
    "SessionStore",
    "SessionStoreBuilder",
    "TypedSessionStore",
    "session_key_from_bytes",
    "session_key_to_bytes",
    "session_segment_interval",
]
