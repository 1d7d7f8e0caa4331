"""The registry of store kinds and the metadata kinds they declare: what may be registered,
and how a directory's metadata is read and compared through its kind."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.errors import ConfigError, InvalidStoreError
from airflow_stateful_provider.streams.state import (
    KEY_VALUE,
    SESSION,
    VERSIONED,
    RocksDBSessionStore,
    open_store,
    read_metadata,
)
from airflow_stateful_provider.streams.state.common import kind as kind_module
from airflow_stateful_provider.streams.state.common import metadata as metadata_module
from airflow_stateful_provider.streams.state.common.kind import (
    StoreKind,
    maintainable_store_types,
    register_store_kind,
    store_kind,
    store_kinds,
)
from airflow_stateful_provider.streams.state.common.metadata import MetadataKind, StoreMetadata, write_metadata


@pytest.fixture
def registry(monkeypatch):
    """Registrations made by the test are forgotten after it."""
    monkeypatch.setattr(kind_module, "_KINDS", dict(kind_module._KINDS))
    monkeypatch.setattr(metadata_module, "_KINDS", dict(metadata_module._KINDS))


def test_the_built_in_kinds_are_registered_in_order():
    assert [(kind.name, kind.store_type) for kind in store_kinds()][:3] == [
        ("key_value", "keyvalue"), ("session", "session"), ("versioned", "versioned")]
    assert store_kind("session") is SESSION
    assert maintainable_store_types()[:2] == ("session", "versioned")
    assert not KEY_VALUE.maintainable and SESSION.maintainable and VERSIONED.maintainable


def test_registering_a_kind_again_is_harmless_and_a_clash_is_refused(registry):
    before = store_kinds()
    assert register_store_kind(SESSION) is SESSION and store_kinds() == before
    with pytest.raises(ConfigError, match=r"store kind 'sessions' \(store_type 'session'\) clashes with the "
                                          r"registered kind 'session' \(store_type 'session'\)"):
        register_store_kind(StoreKind("sessions", MetadataKind("session"), None))
    with pytest.raises(ConfigError, match="clashes with the registered kind 'key_value'"):
        register_store_kind(StoreKind("key_value", MetadataKind("kv2"), None))
    assert store_kinds() == before
    with pytest.raises(InvalidStoreError, match=r"unknown store type 'kv2'; expected one of \['keyvalue', 'session'"):
        store_kind("kv2")


@pytest.mark.parametrize(("declared", "problem"), [
    ({"store_type": ""}, "store_type must be a non-empty identifier, got ''"),
    ({"store_type": "my kind"}, "store_type must be a non-empty identifier"),
    ({"store_type": "k", "required": {"name": 1}}, "settings must be distinct .* from the common fields"),
    ({"store_type": "k", "required": {"size_ms": 1}, "optional": {"size_ms": 0}}, "settings must be distinct"),
])
def test_a_metadata_kind_is_checked_when_declared(declared, problem):
    with pytest.raises(ConfigError, match=problem):
        MetadataKind(**declared)


def test_a_kind_reads_and_compares_only_its_own_settings(registry, tmp_path):
    register_store_kind(StoreKind("windowed", MetadataKind("windowed", required={"window_ms": 1},
                                                           optional={"grace_ms": 0}), None))
    path = tmp_path / "w"
    path.mkdir()
    write_metadata(path, StoreMetadata("windowed", "w", settings={"window_ms": 10, "grace_ms": 2}))
    stored = read_metadata(path)
    assert stored.settings == {"window_ms": 10, "grace_ms": 2} and stored.setting("other") is None
    stored.check_compatible(StoreMetadata("windowed", "w", settings={"window_ms": 10, "grace_ms": 5}), "w")
    with pytest.raises(InvalidStoreError, match="created with window_ms=10 but opened with window_ms=20"):
        stored.check_compatible(StoreMetadata("windowed", "w", settings={"window_ms": 20}), "w")
    with pytest.raises(InvalidStoreError, match=r"never persistent, yet it holds one"):
        open_store(path)
    write_metadata(path, StoreMetadata("windowed", "w", settings={"window_ms": 10, "grace_ms": -1}))
    with pytest.raises(InvalidStoreError, match="grace_ms must be >= 0, got -1"):
        read_metadata(path)
    write_metadata(path, StoreMetadata("windowed", "w"))
    with pytest.raises(InvalidStoreError, match="window_ms must be an integer, got None"):
        read_metadata(path)


def test_a_session_store_reopens_with_another_gap_but_not_another_retention(tmp_path):
    RocksDBSessionStore(tmp_path / "s", 600_000, inactivity_gap=1_000).close()
    with RocksDBSessionStore(tmp_path / "s", 600_000, inactivity_gap=2_000) as store:
        assert store.metadata.setting("inactivity_gap_ms") == 1_000  # informational: as created
    with pytest.raises(InvalidStoreError, match="created with retention_ms=600000 but opened with retention_ms=60000"):
        RocksDBSessionStore(tmp_path / "s", 60_000)
