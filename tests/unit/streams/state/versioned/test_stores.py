"""Versioned key-value stores: every docs/semantics.md §5 example, on RocksDB and in memory."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_stateful_provider.streams.errors import ConfigError, InvalidRecordError
from airflow_stateful_provider.streams.state import (
    NOT_PUT,
    RocksDBVersionedKeyValueStore,
    VersionedRecord,
    versioned_segment_interval,
)
from airflow_stateful_provider.streams.state.versioned.format import decode_row

HR = 300_000
SEG = 100_000
B = 10


def R(value, ts, valid_to=None):  # short for readability of expectations
    return VersionedRecord(value, ts, valid_to)


# -- docs/semantics.md §5 examples --------------------------------------------------------------------


def test_example_in_order_puts(make_versioned):
    store = make_versioned(HR, SEG)
    assert store.put(b"k", b"v", B) == -1
    assert store.put(b"k", b"v2", B + 1) == -1
    assert store.get(b"k") == R(b"v2", B + 1)
    assert store.get(b"k", B) == R(b"v", B, B + 1)
    assert store.get(b"k", B + 2) == R(b"v2", B + 1, None)


def test_example_out_of_order_tombstones(make_versioned):
    store = make_versioned(HR, SEG)
    assert store.put(b"k", b"v", B) == -1
    assert store.put(b"k", None, B - 2) == B
    assert store.put(b"k", None, B - 1) == B
    assert store.put(b"k", None, B - 4) == B - 2
    assert store.put(b"k", b"v5", B - 5) == B - 4
    assert store.put(b"k", b"v3", B - 3) == B - 2
    assert store.put(b"k", None, B - 6) == B - 5
    expected = [
        R(b"v", B),  # get at B
        None,  # B-1
        None,  # B-2
        R(b"v3", B - 3, B - 2),
        None,  # B-4
        R(b"v5", B - 5, B - 4),
        None,  # B-6
    ]
    assert [store.get(b"k", B - i) for i in range(7)] == expected


def test_example_inserts_between_versions(make_versioned):
    store = make_versioned(HR, SEG)
    assert store.put(b"k", b"v", 10) == -1
    assert store.put(b"k", b"v2", 8) == 10
    assert store.put(b"k", b"v1", 9) == 10
    assert store.put(b"k", b"v4", 6) == 8
    assert store.get(b"k", 9) == R(b"v1", 9, 10)
    assert store.get(b"k", 8) == R(b"v2", 8, 9)
    assert store.get(b"k", 7) == R(b"v4", 6, 8)


def test_example_expired_put_is_not_put(make_versioned):
    # docs/semantics.md §5, last example (Kafka's RocksDBVersionedStoreTest.shouldNotPutExpired):
    # v1@10 goes on k1, so k1 keeps v1 and k2 stays empty (a NOT_PUT changes nothing).
    store = make_versioned(HR, SEG)
    assert store.put(b"k", b"v", 300_010) == -1
    assert store.put(b"k1", b"v1", 10) == -1  # exactly observed - HR: still accepted
    assert store.get(b"k1") == R(b"v1", 10)
    assert store.put(b"k2", b"v2", 9) == NOT_PUT
    assert store.get(b"k2") is None
    # and with v1@10 on k2 itself, the NOT_PUT leaves v1 in place
    assert store.put(b"k1", b"v2", 9) == NOT_PUT
    assert store.get(b"k1") == R(b"v1", 10)


def test_default_segment_interval_by_history_retention():
    assert versioned_segment_interval(0) == 2_000
    assert versioned_segment_interval(60_000) == 20_000
    assert versioned_segment_interval(60_001) == 20_000
    assert versioned_segment_interval(300_000) == 60_000
    assert versioned_segment_interval(300_001) == 60_000
    assert versioned_segment_interval(3_600_000) == 300_000
    assert versioned_segment_interval(3_600_001) == 300_000
    assert versioned_segment_interval(86_400_000) == 3_600_000


# -- more behaviour ---------------------------------------------------------------------------


def test_same_timestamp_replaces(make_versioned):
    store = make_versioned(HR, SEG)
    store.put(b"k", b"a", 5)
    store.put(b"k", b"b", 9)
    assert store.put(b"k", b"a2", 5) == 9
    assert store.put(b"k", b"b2", 9) == -1
    assert store.get_versions(b"k", ascending=True) == [R(b"a2", 5, 9), R(b"b2", 9)]


def test_delete_returns_version_valid_before(make_versioned):
    store = make_versioned(HR, SEG)
    store.put(b"k", b"v", 10)
    store.put(b"k", b"w", 20)
    assert store.delete(b"k", 15) == R(b"v", 10, 20)
    assert store.get(b"k", 16) is None
    assert store.get(b"k") == R(b"w", 20)
    assert store.delete(b"k", 25) == R(b"w", 20)
    assert store.get(b"k") is None
    assert store.delete(b"missing", 30) is None


def test_delete_beyond_history_retention_does_nothing(make_versioned):
    store = make_versioned(HR, SEG)
    store.put(b"k1", b"v1", 1)
    store.put(b"k2", b"v2", 1)
    store.put(b"other", b"x", HR + 10)
    assert store.delete(b"k1", 10) == R(b"v1", 1)
    assert store.get(b"k1") is None
    assert store.delete(b"k2", 9) is None
    assert store.get(b"k2") == R(b"v2", 1)


def test_get_beyond_history_retention_answers_only_from_latest(make_versioned):
    store = make_versioned(HR, SEG)
    store.put(b"k", b"old", 0)
    store.put(b"k", b"new", 100)
    store.put(b"z", b"clock", HR + 150)
    assert store.get(b"k", 120) == R(b"new", 100)  # the latest still answers
    assert store.get(b"k", 50) is None  # older than observed - HR: not answered
    assert store.get_versions(b"k", 0, 100) == [R(b"new", 100)]  # to_time beyond HR


def test_latest_version_never_expires(make_versioned):
    store = make_versioned(HR, SEG)
    store.put(b"k", b"v", 5)
    store.put(b"clock", b"x", 10 * HR)
    assert store.get(b"k") == R(b"v", 5)
    assert store.get(b"k", 10 * HR) == R(b"v", 5)


def test_get_versions_ranges_and_order(make_versioned):
    store = make_versioned(HR, SEG)
    for ts, value in [(10, b"a"), (20, None), (30, b"c"), (40, b"d")]:
        store.put(b"k", value, ts)
    assert store.get_versions(b"k") == [R(b"d", 40), R(b"c", 30, 40), R(b"a", 10, 20)]
    assert store.get_versions(b"k", ascending=True) == [R(b"a", 10, 20), R(b"c", 30, 40), R(b"d", 40)]
    assert store.get_versions(b"k", 15, 35) == [R(b"c", 30, 40), R(b"a", 10, 20)]
    assert store.get_versions(b"k", 20, 29) == []  # only the tombstone was valid then
    assert store.get_versions(b"k", 40, 40) == [R(b"d", 40)]
    assert store.get_versions(b"k", 39, 39) == [R(b"c", 30, 40)]
    assert store.get_versions(b"k", 50, 10) == []
    assert store.get_versions(b"nope") == []


def test_get_versions_finds_version_whose_valid_to_is_in_a_later_segment(make_versioned):
    # KIP-968 semantics (docs/semantics.md §5): every version valid at some time in [from, to].
    # Kafka's RocksDBVersionedStore scans only segments up to segment(to_time) and misses
    # such a version; we follow the documented semantics, not that scan bound.
    store = make_versioned(HR, SEG)
    store.put(b"k", b"v", 10)
    store.put(b"k", b"w", 250_000)
    assert store.get(b"k", 20) == R(b"v", 10, 250_000)
    assert store.get_versions(b"k", 0, 20) == [R(b"v", 10, 250_000)]


def test_zero_history_retention_keeps_only_latest(make_versioned):
    # Kafka allows history retention 0 (RocksDBVersionedStoreTest.shouldAllowZeroHistoryRetention)
    store = make_versioned(0)
    assert store.put(b"k", b"a", 10) == -1
    assert store.put(b"k", b"b", 20) == -1
    assert store.put(b"k", b"c", 15) == NOT_PUT
    assert store.get(b"k", 15) is None
    assert store.get(b"k", 20) == R(b"b", 20)
    assert store.get(b"k") == R(b"b", 20)


def test_tombstone_for_unknown_key_still_bounds_older_puts(make_versioned):
    store = make_versioned(HR, SEG)
    assert store.put(b"k", None, 50) == -1
    assert store.get(b"k") is None
    assert store.put(b"k", b"v", 40) == 50
    assert store.get(b"k", 45) == R(b"v", 40, 50)
    assert store.get(b"k", 50) is None
    assert store.put(b"k", b"w", 60) == -1
    assert store.get_versions(b"k", ascending=True) == [R(b"v", 40, 50), R(b"w", 60)]


def test_segments_expire_whole(tmp_path):
    store = RocksDBVersionedKeyValueStore(tmp_path / "v", HR, segment_interval=SEG)
    store.put(b"k", b"a", 0)
    store.put(b"k", b"b", 50_000)  # a moves to segment 0 (valid_to 50000)
    store.put(b"k", b"c", 150_000)  # b moves to segment 1 (valid_to 150000)
    assert [s.segment_id for s in store.stats().live_segments] == [0, 1]
    store.put(b"clock", b"x", 399_999)  # min live segment (399999-300000)//100000 = 0
    assert [s.segment_id for s in store.stats().live_segments] == [0, 1]
    store.put(b"clock2", b"x", 400_000)  # min live segment 1: segment 0 dropped whole
    assert [s.segment_id for s in store.stats().live_segments] == [1]
    assert store.get_versions(b"k", ascending=True) == [R(b"b", 50_000, 150_000), R(b"c", 150_000)]
    store.close()


def test_segment_row_holds_several_versions_of_a_key(tmp_path):
    store = RocksDBVersionedKeyValueStore(tmp_path / "v", HR, segment_interval=SEG)
    for ts in (1, 2, 3, 4):
        store.put(b"k", b"v%d" % ts, ts)
    row = store._db.get(b"\x02" + (0).to_bytes(8, "big") + b"k")
    assert decode_row(row) == (4, [1, 2, 3], [b"v1", b"v2", b"v3"])
    latest = store._db.get(b"\x01k")
    assert latest == (4).to_bytes(8, "big") + b"v4"
    store.close()


def test_observed_stream_time_survives_reopen(tmp_path):
    path = tmp_path / "v"
    store = RocksDBVersionedKeyValueStore(path, HR, segment_interval=SEG)
    store.put(b"k", b"v", 500_000)
    store.close()
    store = RocksDBVersionedKeyValueStore(path, HR, segment_interval=SEG)
    assert store.observed_stream_time == 500_000
    assert store.put(b"k", b"old", 199_999) == NOT_PUT
    store.close()


def test_enforce_retention_drops_segments_when_stream_time_stalled(tmp_path):
    store = RocksDBVersionedKeyValueStore(tmp_path / "v", HR, segment_interval=SEG)
    store.put(b"k", b"a", 0)
    store.put(b"k", b"b", 10)
    store.put(b"k", b"c", 120_000)
    assert [s.segment_id for s in store.stats().live_segments] == [0, 1]
    result = store.enforce_retention(500_000)
    assert [s.segment_id for s in result.segments_dropped] == [0, 1]
    assert result.observed_stream_time_before == 120_000
    assert result.observed_stream_time_after == 500_000
    assert result.min_live_segment == 2
    assert result.bytes_before > 0 and result.bytes_after > 0
    assert store.get_versions(b"k") == [R(b"c", 120_000)]
    assert store.put(b"k", b"late", 199_999) == NOT_PUT
    again = store.enforce_retention(500_000)
    assert again.segments_dropped == ()
    store.close()


@pytest.mark.parametrize(
    "key, value, ts, match",
    [
        (None, b"v", 1, "key cannot be null"),
        ("k", b"v", 1, "keys must be bytes, got str"),
        (b"k", "v", 1, "values must be bytes or None, got str"),
        (b"k", b"v", -1, "timestamp must be >= 0.*-1"),
        (b"k", b"v", 1.5, "timestamp must be an int.*1.5"),
        (b"k", b"v", 2**63, "fit in 64 bits"),
    ],
)
def test_bad_puts(make_versioned, key, value, ts, match):
    store = make_versioned(HR, SEG)
    with pytest.raises(InvalidRecordError, match=match):
        store.put(key, value, ts)


def test_bad_configuration(tmp_path):
    with pytest.raises(ConfigError, match="history retention must be >= 0 ms, got -1 ms"):
        RocksDBVersionedKeyValueStore(tmp_path / "a", -1)
    with pytest.raises(ConfigError, match="segment interval must be > 0 ms, got 0 ms"):
        RocksDBVersionedKeyValueStore(tmp_path / "b", 10, segment_interval=0)
    with pytest.raises(ConfigError, match="needs a history retention"):
        RocksDBVersionedKeyValueStore(tmp_path / "c")
    assert list(tmp_path.iterdir()) == []  # nothing half-created


def test_durations_accept_timedelta(tmp_path):
    store = RocksDBVersionedKeyValueStore(tmp_path / "v", timedelta(hours=1))
    assert store.history_retention_ms == 3_600_000
    assert store.segment_interval_ms == 300_000
    store.close()


def test_query_times_must_be_ints(make_versioned):
    from airflow_stateful_provider.streams.state import VersionedKeyValueStore

    store = make_versioned(HR, SEG)
    assert isinstance(store, VersionedKeyValueStore)
    with pytest.raises(InvalidRecordError, match="as_of must be int ms or None, got float 1.5"):
        store.get(b"k", 1.5)
    with pytest.raises(InvalidRecordError, match="to_time must be int ms or None, got str"):
        store.get_versions(b"k", 0, "9")
