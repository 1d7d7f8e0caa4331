"""Changelog record formats and restoring stores from their changelog."""

from __future__ import annotations

import struct

import pytest

from airflow_stateful_provider.streams.errors import ConfigError, InvalidRecordError
from airflow_stateful_provider.streams.state import (
    NOT_PUT,
    ChangelogRecord,
    ChangeloggingSessionStore,
    ChangeloggingVersionedKeyValueStore,
    ChangelogWriter,
    ListChangelogWriter,
    SessionKey,
    VersionedRecord,
)

HR = 300_000


def _rows(writer):
    return [(r.key, r.value, r.timestamp) for r in writer.records]


def test_list_changelog_writer_is_a_changelog_writer():
    writer = ListChangelogWriter()
    assert isinstance(writer, ChangelogWriter)
    writer.send(b"k", None, 3)
    assert list(writer) == [ChangelogRecord(b"k", None, 3, 0)]
    assert len(writer) == 1


def test_writer_without_send_is_refused(make_kv):
    from airflow_stateful_provider.streams.state import ChangeloggingKeyValueStore

    with pytest.raises(ConfigError, match="must have send"):
        ChangeloggingKeyValueStore(make_kv(), object())


def test_session_changelog_key_is_key_end_start(make_session):
    writer = ListChangelogWriter()
    store = ChangeloggingSessionStore(make_session(HR), writer)
    store.put(SessionKey(b"k", 5, 9), b"agg")
    store.remove(SessionKey(b"k", 5, 9))
    key = b"k" + struct.pack(">qq", 9, 5)
    assert _rows(writer) == [(key, b"agg", 9), (key, None, 9)]  # default timestamp: session end


def test_session_changelog_timestamp_from_processing_context(make_session):
    writer = ListChangelogWriter()
    store = ChangeloggingSessionStore(make_session(HR), writer, timestamp_fn=lambda: 42)
    store.put(SessionKey(b"k", 5, 9), b"agg")
    assert _rows(writer)[0][2] == 42


def test_session_writes_dropped_by_the_store_are_still_logged(make_session):
    writer = ListChangelogWriter()
    store = ChangeloggingSessionStore(make_session(HR), writer)
    store.put(SessionKey(b"k", 1_000_000, 1_000_000), b"new")
    store.put(SessionKey(b"k", 0, 0), b"expired")
    assert len(writer) == 2
    assert store.fetch_session(b"k", 0, 0) is None


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


def test_session_restore_advances_time_to_batch_end_first(make_session):
    # Kafka: AbstractRocksDBSegmentedBytesStore.getWriteBatches
    store = make_session(HR)
    key_late = b"k" + struct.pack(">qq", 0, 0)
    key_new = b"k" + struct.pack(">qq", 1_000_000, 1_000_000)
    applied = store.restore_batch(
        [ChangelogRecord(key_late, b"old", 0, 0), ChangelogRecord(None, b"x", 0, 1), ChangelogRecord(key_new, b"new", 0, 2)]
    )
    assert applied == 1
    assert store.fetch(b"k") == [(SessionKey(b"k", 1_000_000, 1_000_000), b"new")]


def test_session_restore_rejects_short_keys(make_session):
    store = make_session(HR)
    with pytest.raises(InvalidRecordError, match="offset 7"):
        store.restore_batch([ChangelogRecord(b"short", b"x", 0, 7)])


def test_session_restore_rejects_a_window_that_ends_before_it_starts(make_session):
    store = make_session(HR)
    good = ChangelogRecord(b"k" + struct.pack(">qq", 10, 5), b"x", 0, 8)
    with pytest.raises(InvalidRecordError, match=r"offset 9 has session window \[5, 1\]; expected 0 <= start <= end"):
        store.restore_batch([good, ChangelogRecord(b"k" + struct.pack(">qq", 1, 5), b"x", 0, 9)])


def test_session_restore_names_the_bad_record_among_keys_of_any_length(make_session):
    # the windows of a batch are read at once: the error must still name the right record
    # after null keys were skipped, whatever the lengths of the keys before it
    store = make_session(HR)
    batch = [
        ChangelogRecord(None, b"x", 0, 20),
        ChangelogRecord(b"a-long-user-key" + struct.pack(">qq", 10, 5), b"x", 0, 21),
        ChangelogRecord(b"" + struct.pack(">qq", 7, 7), b"x", 0, 22),
        ChangelogRecord(b"kk" + struct.pack(">qq", 3, -4), b"x", 0, 23),
        ChangelogRecord(b"k" + struct.pack(">qq", 1, 5), b"x", 0, 24),
    ]
    with pytest.raises(InvalidRecordError, match=r"offset 23 has session window \[-4, 3\]"):
        store.restore_batch(batch)
    with pytest.raises(InvalidRecordError, match=r"offset 25 has a 15-byte key"):
        store.restore_batch(batch[:3] + [ChangelogRecord(b"k" * 15, b"x", 0, 25)])
    assert store.observed_stream_time == -1  # a refused batch writes nothing


def test_restored_store_matches_original_for_every_type(make_kv, make_session, make_versioned):
    from airflow_stateful_provider.streams.state import ChangeloggingKeyValueStore

    kv_log, session_log, versioned_log = ListChangelogWriter(), ListChangelogWriter(), ListChangelogWriter()
    kv = ChangeloggingKeyValueStore(make_kv(), kv_log, timestamp_fn=lambda: 0)
    session = ChangeloggingSessionStore(make_session(HR), session_log)
    versioned = ChangeloggingVersionedKeyValueStore(make_versioned(HR, 50_000), versioned_log)
    for i in range(300):
        key = b"key-%d" % (i % 17)
        ts = i * 1_000 + (i % 7) * 13_000
        kv.put(key, b"%d" % i if i % 5 else None)
        session.put(SessionKey(key, ts, ts + i % 3), b"%d" % i)
        if i % 11 == 0:
            session.remove(SessionKey(key, ts, ts + i % 3))
        versioned.put(key, b"%d" % i if i % 4 else None, ts)
    kv2, session2, versioned2 = make_kv(), make_session(HR), make_versioned(HR, 50_000)
    for restored, log in ((kv2, kv_log), (session2, session_log), (versioned2, versioned_log)):
        for start in range(0, len(log.records), 64):
            restored.restore_batch(log.records[start : start + 64])
    assert list(kv2.all()) == list(kv.all())
    assert session2.all() == session.all()
    assert session2.observed_stream_time == session.observed_stream_time
    for i in range(17):
        key = b"key-%d" % i
        assert versioned2.get_versions(key) == versioned.get_versions(key)
        for t in range(0, 320_000, 997):
            assert versioned2.get(key, t) == versioned.get(key, t)


@pytest.mark.parametrize(
    "record",
    [ChangelogRecord(b"k", b"v", -1, 3), ChangelogRecord(b"k", "v", 1, 3), ChangelogRecord("k", b"v", 1, 3)],
)
def test_versioned_restore_rejects_invalid_records_naming_the_offset(make_versioned, record):
    store = make_versioned(HR)
    with pytest.raises(InvalidRecordError, match="offset 3"):
        store.restore_batch([record])
