"""The versioned changelog record format, and restoring versioned stores from their changelog."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.errors import InvalidRecordError
from airflow_stateful_provider.streams.state import (
    NOT_PUT,
    ChangeloggingVersionedKeyValueStore,
    ChangelogRecord,
    ListChangelogWriter,
    VersionedRecord,
)

HR = 300_000


def _rows(writer):
    return [(r.key, r.value, r.timestamp) for r in writer.records]


def test_versioned_changelog_uses_version_timestamp(make_versioned):
    writer = ListChangelogWriter()
    store = ChangeloggingVersionedKeyValueStore(make_versioned(HR), writer)
    assert store.put(b"k", b"v", 10) == -1
    assert store.delete(b"k", 20) == VersionedRecord(b"v", 10, None)
    store.put(b"clock", b"x", 10 * HR)
    assert store.put(b"k", b"late", 5) == NOT_PUT  # not stored, but logged (as Kafka does)
    assert store.delete(b"k", 6) is None
    assert _rows(writer) == [
        (b"k", b"v", 10),
        (b"k", None, 20),
        (b"clock", b"x", 10 * HR),
        (b"k", b"late", 5),
        (b"k", None, 6),
    ]


def test_versioned_restore_skips_records_beyond_history_retention(make_versioned):
    # Kafka: RocksDBVersionedStoreTest.shouldNotRestoreExpired
    store = make_versioned(HR)
    store.restore_batch(
        [
            ChangelogRecord(b"k", b"v", HR + 10, 0),
            ChangelogRecord(b"k1", b"v1", 10, 1),
            ChangelogRecord(b"k2", b"v2", 9, 2),
        ]
    )
    assert store.get(b"k") == VersionedRecord(b"v", HR + 10)
    assert store.get(b"k1") == VersionedRecord(b"v1", 10)
    assert store.get(b"k2") is None


def test_versioned_restore_keeps_records_expired_only_by_batch_end(make_versioned):
    # Kafka: RocksDBVersionedStoreTest.shouldRestoreEvenIfRecordWouldBeExpiredByEndOfBatch
    store = make_versioned(HR)
    store.restore_batch([ChangelogRecord(b"k2", b"v2", 0, 0), ChangelogRecord(b"k", b"v", HR + 10, 1)])
    assert store.get(b"k2") == VersionedRecord(b"v2", 0)
    assert store.get(b"k") == VersionedRecord(b"v", HR + 10)


def test_versioned_restore_with_out_of_order_history(make_versioned):
    source = make_versioned(HR, 100_000)
    writer = ListChangelogWriter()
    logged = ChangeloggingVersionedKeyValueStore(source, writer)
    for key, value, ts in [(b"k", b"a", 50), (b"k", b"c", 250_000), (b"k", b"b", 120_000), (b"k", None, 260_000)]:
        logged.put(key, value, ts)
    logged.put(b"k", b"d", 255_000)
    target = make_versioned(HR, 100_000)
    assert target.restore_batch(writer.records) == 5
    for t in (49, 50, 119_999, 120_000, 250_000, 255_000, 260_000):
        assert target.get(b"k", t) == source.get(b"k", t)
    assert target.get_versions(b"k") == source.get_versions(b"k")
    assert target.observed_stream_time == source.observed_stream_time == 260_000


@pytest.mark.parametrize(
    "record",
    [ChangelogRecord(b"k", b"v", -1, 3), ChangelogRecord(b"k", "v", 1, 3), ChangelogRecord("k", b"v", 1, 3)],
)
def test_versioned_restore_rejects_invalid_records_naming_the_offset(make_versioned, record):
    store = make_versioned(HR)
    with pytest.raises(InvalidRecordError, match="offset 3"):
        store.restore_batch([record])
