"""The session changelog record format, and restoring session stores from their changelog."""

from __future__ import annotations

import struct

import pytest

from airflow_stateful_provider.streams.errors import InvalidRecordError
from airflow_stateful_provider.streams.state import (
    ChangeloggingSessionStore,
    ChangelogRecord,
    ListChangelogWriter,
    SessionKey,
)

HR = 300_000


def _rows(writer):
    return [(r.key, r.value, r.timestamp) for r in writer.records]


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


def test_session_restore_advances_time_to_batch_end_first(make_session):
    # Kafka: AbstractRocksDBSegmentedBytesStore.getWriteBatches
    store = make_session(HR)
    key_late = b"k" + struct.pack(">qq", 0, 0)
    key_new = b"k" + struct.pack(">qq", 1_000_000, 1_000_000)
    applied = store.restore_batch(
        [ChangelogRecord(key_late, b"old", 0, 0), ChangelogRecord(None, b"x", 0, 1),
         ChangelogRecord(key_new, b"new", 0, 2)]
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
