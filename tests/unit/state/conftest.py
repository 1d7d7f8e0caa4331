"""Fixtures for store tests: each store type in both implementations."""

from __future__ import annotations

import itertools

import pytest

from airflow_stateful_provider.streams.state import (
    InMemoryKeyValueStore,
    InMemorySessionStore,
    InMemoryVersionedKeyValueStore,
    RocksDBKeyValueStore,
    RocksDBSessionStore,
    RocksDBVersionedKeyValueStore,
)

_counter = itertools.count()


@pytest.fixture(params=["rocksdb", "memory"])
def impl(request):
    return request.param


@pytest.fixture
def make_kv(tmp_path, impl):
    stores = []

    def make():
        if impl == "rocksdb":
            store = RocksDBKeyValueStore(tmp_path / f"kv-{next(_counter)}")
        else:
            store = InMemoryKeyValueStore()
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def make_session(tmp_path, impl):
    stores = []

    def make(retention):
        if impl == "rocksdb":
            store = RocksDBSessionStore(tmp_path / f"session-{next(_counter)}", retention)
        else:
            store = InMemorySessionStore(retention)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def make_versioned(tmp_path, impl):
    stores = []

    def make(history_retention, segment_interval=None):
        if impl == "rocksdb":
            store = RocksDBVersionedKeyValueStore(
                tmp_path / f"versioned-{next(_counter)}", history_retention, segment_interval=segment_interval
            )
        else:
            store = InMemoryVersionedKeyValueStore(history_retention, segment_interval=segment_interval)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()
