"""The changelog writer contract, and every kind's store restored from its changelog equal to the original."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.state import (
    ChangeloggingSessionStore,
    ChangeloggingVersionedKeyValueStore,
    ChangelogRecord,
    ChangelogWriter,
    ListChangelogWriter,
    SessionKey,
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
