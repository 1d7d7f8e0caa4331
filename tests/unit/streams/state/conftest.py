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


def _fresh(tmp_path, kind):
    return tmp_path / f"{kind}-{next(_counter)}"


def _factory(impl, rocksdb, memory):
    """Body of the make_* fixtures: ``make(*args)`` builds a store of the ``impl`` under test;
    every store it built is closed after the test."""
    stores = []

    def make(*args, **kwargs):
        store = (rocksdb if impl == "rocksdb" else memory)(*args, **kwargs)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def make_kv(tmp_path, impl):
    yield from _factory(impl, lambda: RocksDBKeyValueStore(_fresh(tmp_path, "kv")), InMemoryKeyValueStore)


@pytest.fixture
def make_session(tmp_path, impl):
    yield from _factory(
        impl, lambda retention: RocksDBSessionStore(_fresh(tmp_path, "session"), retention), InMemorySessionStore
    )


@pytest.fixture
def make_versioned(tmp_path, impl):
    def rocksdb(history_retention, segment_interval=None):
        return RocksDBVersionedKeyValueStore(
            _fresh(tmp_path, "versioned"), history_retention, segment_interval=segment_interval
        )

    def memory(history_retention, segment_interval=None):
        return InMemoryVersionedKeyValueStore(history_retention, segment_interval=segment_interval)

    yield from _factory(impl, rocksdb, memory)
