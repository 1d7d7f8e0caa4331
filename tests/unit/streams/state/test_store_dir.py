"""Self-describing store directories: metadata, open_store, read-only access from another
process, refusal of bad directories, maintenance results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from airflow_stateful_provider.streams.errors import ConfigError, InvalidStoreError, ReadOnlyStoreError
from airflow_stateful_provider.streams.state import (
    FORMAT_VERSION,
    METADATA_FILE_NAME,
    RocksDBKeyValueStore,
    RocksDBSessionStore,
    RocksDBVersionedKeyValueStore,
    SessionKey,
    find_stores,
    open_store,
    read_metadata,
)
from airflow_stateful_provider.streams.state.common import metadata as metadata_module
from airflow_stateful_provider.streams.state.common import rocks


def _tree(path):
    return sorted(os.path.relpath(os.path.join(root, name), path)
                  for root, _d, files in os.walk(path) for name in files)


def test_metadata_file_describes_each_store_type(tmp_path):
    RocksDBKeyValueStore(tmp_path / "kv", key_serde="string", value_serde="json").close()
    RocksDBSessionStore(tmp_path / "s", inactivity_gap=300_000, grace_period=60_000, value_serde="int64").close()
    RocksDBVersionedKeyValueStore(tmp_path / "v", 3_600_000, name="rates").close()
    assert json.loads((tmp_path / "kv" / METADATA_FILE_NAME).read_text()) == {
        "format_version": FORMAT_VERSION,
        "store_type": "keyvalue",
        "name": "kv",
        "key_serde": "string",
        "value_serde": "json",
    }
    assert json.loads((tmp_path / "s" / METADATA_FILE_NAME).read_text()) == {
        "format_version": FORMAT_VERSION,
        "store_type": "session",
        "name": "s",
        "key_serde": "bytes",
        "value_serde": "int64",
        "retention_ms": 360_000,
        "segment_interval_ms": 180_000,
        "inactivity_gap_ms": 300_000,
        "grace_period_ms": 60_000,
    }
    meta = read_metadata(tmp_path / "v")
    assert (meta.store_type, meta.name, meta.settings) == (
        "versioned",
        "rates",
        {"history_retention_ms": 3_600_000, "segment_interval_ms": 300_000},
    )
    assert sorted(os.listdir(tmp_path / "v")) == sorted([METADATA_FILE_NAME, "rocksdb"])


def test_open_store_opens_each_type_from_its_metadata(tmp_path):
    kv = RocksDBKeyValueStore(tmp_path / "kv")
    kv.put(b"k", b"v")
    kv.close()
    s = RocksDBSessionStore(tmp_path / "s", 300_000)
    s.put(SessionKey(b"k", 0, 5), b"agg")
    s.close()
    v = RocksDBVersionedKeyValueStore(tmp_path / "v", 1000, segment_interval=100)
    v.put(b"k", b"v", 7)
    v.close()

    with open_store(tmp_path / "kv") as store:
        assert isinstance(store, RocksDBKeyValueStore) and store.get(b"k") == b"v"
    with open_store(tmp_path / "s", read_only=True) as store:
        assert isinstance(store, RocksDBSessionStore)
        assert store.retention_ms == 300_000
        assert store.fetch(b"k") == [(SessionKey(b"k", 0, 5), b"agg")]
    with open_store(str(tmp_path / "v"), expected_type="versioned") as store:
        assert isinstance(store, RocksDBVersionedKeyValueStore)
        assert (store.history_retention_ms, store.segment_interval_ms) == (1000, 100)
        assert store.get(b"k").value == b"v"
    assert find_stores(tmp_path) == [str(tmp_path / n) for n in ("kv", "s", "v")]


def test_unknown_format_version_is_refused_untouched(tmp_path):
    RocksDBKeyValueStore(tmp_path / "kv").close()
    meta_path = tmp_path / "kv" / METADATA_FILE_NAME
    doc = json.loads(meta_path.read_text())
    doc["format_version"] = 99
    meta_path.write_text(json.dumps(doc))
    before = _tree(tmp_path / "kv")
    for opener in (lambda: open_store(tmp_path / "kv"), lambda: RocksDBKeyValueStore(tmp_path / "kv")):
        with pytest.raises(InvalidStoreError, match="unknown store format version 99"):
            opener()
    assert _tree(tmp_path / "kv") == before
    assert json.loads(meta_path.read_text())["format_version"] == 99


def test_store_directory_of_another_type(tmp_path):
    RocksDBKeyValueStore(tmp_path / "kv").close()
    with pytest.raises(InvalidStoreError, match=r"holds a 'keyvalue' store, not a 'session' store"):
        RocksDBSessionStore(tmp_path / "kv", 1000)
    with pytest.raises(InvalidStoreError, match=r"holds a 'keyvalue' store, not a 'versioned' store"):
        open_store(tmp_path / "kv", expected_type="versioned")
    with pytest.raises(InvalidStoreError, match="unknown expected_type 'nope'"):
        open_store(tmp_path / "kv", expected_type="nope")


def test_configuration_mismatch_names_both_values(tmp_path):
    RocksDBSessionStore(tmp_path / "s", 300_000).close()
    with pytest.raises(InvalidStoreError, match="created with retention_ms=300000 but opened with retention_ms=400000"):
        RocksDBSessionStore(tmp_path / "s", 400_000)
    with pytest.raises(InvalidStoreError, match="value_serde='bytes' but opened with value_serde='json'"):
        RocksDBSessionStore(tmp_path / "s", 300_000, value_serde="json")
    RocksDBSessionStore(tmp_path / "s").close()  # no retention given: the stored one is used


@pytest.mark.parametrize(
    "content, match",
    [
        ("{nope", "not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"store_type": "keyvalue", "name": "x"}', "no integer format_version"),
        ('{"format_version": 1, "store_type": "table", "name": "x"}', "unknown store_type 'table'"),
        ('{"format_version": 1, "store_type": "keyvalue"}', "non-empty string 'name'"),
        ('{"format_version": 1, "store_type": "session", "name": "x"}', "retention_ms must be an integer"),
        (
            '{"format_version": 1, "store_type": "session", "name": "x", "retention_ms": 0, "segment_interval_ms": 1}',
            "retention_ms must be >= 1, got 0",
        ),
        ('{"format_version": 1, "store_type": "keyvalue", "name": "x", "key_serde": 3}', "key_serde must be"),
    ],
)
def test_invalid_metadata(tmp_path, content, match):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / METADATA_FILE_NAME).write_text(content)
    with pytest.raises(InvalidStoreError, match=match) as info:
        open_store(tmp_path / "store")
    assert METADATA_FILE_NAME in str(info.value)


def test_missing_metadata_and_non_store_directories_are_refused_untouched(tmp_path):
    with pytest.raises(InvalidStoreError, match="does not exist"):
        open_store(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "data.txt").write_text("hello")
    with pytest.raises(InvalidStoreError, match=f"has no {METADATA_FILE_NAME}"):
        open_store(tmp_path / "other")
    with pytest.raises(InvalidStoreError, match="non-empty directory without"):
        RocksDBKeyValueStore(tmp_path / "other")
    assert _tree(tmp_path / "other") == ["data.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidStoreError, match="exists and is not a directory"):
        RocksDBKeyValueStore(tmp_path / "file")
    with pytest.raises(InvalidStoreError, match="is not a directory"):
        open_store(tmp_path / "file")


def test_metadata_without_rocksdb_directory(tmp_path):
    RocksDBKeyValueStore(tmp_path / "kv").close()
    import shutil

    shutil.rmtree(tmp_path / "kv" / "rocksdb")
    with pytest.raises(InvalidStoreError, match="has store metadata but no rocksdb/ directory"):
        open_store(tmp_path / "kv")


def test_empty_directory_becomes_a_store(tmp_path):
    (tmp_path / "kv").mkdir()
    RocksDBKeyValueStore(tmp_path / "kv").close()
    assert read_metadata(tmp_path / "kv").store_type == "keyvalue"


def test_failed_creation_leaves_nothing_behind(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(rocks, "write_metadata", broken)
    with pytest.raises(OSError, match="disk full"):
        RocksDBKeyValueStore(tmp_path / "kv")
    assert os.listdir(tmp_path) == []

    monkeypatch.undo()
    real_rdict = rocks._rdict
    monkeypatch.setattr(rocks, "_rdict", broken)
    with pytest.raises(OSError, match="disk full"):
        RocksDBVersionedKeyValueStore(tmp_path / "v", 1000)
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(rocks, "_rdict", real_rdict)
    RocksDBVersionedKeyValueStore(tmp_path / "v", 1000).close()
    assert os.listdir(tmp_path) == ["v"]


def test_invalid_configuration_creates_nothing(tmp_path):
    with pytest.raises(ConfigError):
        RocksDBSessionStore(tmp_path / "s", -1)
    with pytest.raises(Exception, match="unknown serde name 'avro'"):
        RocksDBKeyValueStore(tmp_path / "kv", key_serde="avro")
    assert os.listdir(tmp_path) == []


def test_metadata_written_atomically(tmp_path, monkeypatch):
    calls = []
    real_replace = os.replace

    def spy(src, dst):
        calls.append((os.path.basename(src), os.path.basename(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(metadata_module.os, "replace", spy)
    RocksDBKeyValueStore(tmp_path / "kv").close()
    assert (METADATA_FILE_NAME + ".tmp", METADATA_FILE_NAME) in calls


def test_second_writer_is_refused_with_a_hint(tmp_path):
    store = RocksDBKeyValueStore(tmp_path / "kv")
    with pytest.raises(InvalidStoreError, match="already open for writing.*read_only=True"):
        RocksDBKeyValueStore(tmp_path / "kv")
    store.close()


def test_read_only_store_refuses_writes_and_maintenance(tmp_path):
    RocksDBVersionedKeyValueStore(tmp_path / "v", 1000).close()
    store = open_store(tmp_path / "v", read_only=True)
    with pytest.raises(ReadOnlyStoreError, match="opened read-only"):
        store.put(b"k", b"v", 1)
    with pytest.raises(ReadOnlyStoreError):
        store.enforce_retention(10)
    with pytest.raises(ReadOnlyStoreError):
        store.compact()
    assert store.stats().store_type == "versioned"
    store.close()
    store.close()


WRITER = textwrap.dedent(
    """
    import sys
    from airflow_stateful_provider.streams.state import RocksDBSessionStore, SessionKey
    store = RocksDBSessionStore({path!r}, 300000)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "put":
            store.put(SessionKey(command[1].encode(), 0, int(command[2])), b"x")
        elif command[0] == "flush":
            store.flush()
        elif command[0] == "quit":
            break
        print("ok", flush=True)
    store.close()
    """
)


def test_read_only_open_while_another_process_writes(tmp_path):
    path = str(tmp_path / "s")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(path=path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def tell(command):
        writer.stdin.write(command + "\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "ok"

    try:
        tell("put a 100")
        tell("flush")
        with pytest.raises(InvalidStoreError, match="already open for writing"):
            RocksDBSessionStore(path, 300000)
        reader = open_store(path, read_only=True)
        assert [s for s, _ in reader.fetch(b"a")] == [SessionKey(b"a", 0, 100)]
        assert reader.stats().observed_stream_time == 100
        tell("put b 200")
        tell("flush")
        reader.refresh()
        assert [s for s, _ in reader.fetch(b"b")] == [SessionKey(b"b", 0, 200)]
        assert reader.observed_stream_time == 200
        reader.close()
        writer.stdin.write("quit\n")
        writer.stdin.flush()
        assert writer.wait(timeout=30) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    # the writer is gone: a normal open works and sees everything
    with RocksDBSessionStore(path) as store:
        assert len(store.all()) == 2


def test_stats_and_compaction(tmp_path):
    store = RocksDBKeyValueStore(tmp_path / "kv")
    for i in range(20_000):
        store.put(b"k%05d" % i, b"x" * 200)
    store.flush()
    for i in range(20_000):
        store.put(b"k%05d" % i, None)
    stats = store.stats()
    assert stats.store_type == "keyvalue" and stats.path == str(tmp_path / "kv")
    assert stats.bytes_on_disk > 0
    result = store.compact()
    assert result.bytes_before > result.bytes_after
    assert result.duration_s >= 0
    assert result.as_dict().keys() == {"bytes_before", "bytes_after", "duration_s"}
    store.close()


def test_session_and_versioned_stats(tmp_path):
    s = RocksDBSessionStore(tmp_path / "s", 300_000)
    s.put(SessionKey(b"k", 0, 10), b"x")
    s.put(SessionKey(b"k", 200_000, 200_000), b"y")
    stats = s.stats()
    assert stats.observed_stream_time == 200_000
    assert stats.retention_ms == 300_000 and stats.segment_interval_ms == 150_000
    assert [(x.segment_id, x.start_ms, x.end_ms) for x in stats.live_segments] == [(0, 0, 149_999),
                                                                                   (1, 150_000, 299_999)]
    assert stats.approximate_num_entries >= 2
    s.close()
    v = RocksDBVersionedKeyValueStore(tmp_path / "v", 1000, segment_interval=100)
    assert v.stats().observed_stream_time is None
    v.close()
