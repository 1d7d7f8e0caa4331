"""The versioned store's segment row encoding."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_stateful_provider.streams.state.versioned.format import (
    decode_row,
    encode_entry,
    encode_row,
    find_in_row,
    row_append,
    row_first_from,
    row_next_ts,
)


def test_layout():
    row = encode_row(30, [10, 20], [b"ab", None])
    assert row == (
        (30).to_bytes(8, "big") + (2).to_bytes(4, "big")
        + (10).to_bytes(8, "big") + (2).to_bytes(4, "big") + b"ab"
        + (20).to_bytes(8, "big") + (-1).to_bytes(4, "big", signed=True)
    )
    assert decode_row(row) == (30, [10, 20], [b"ab", None])
    assert row_next_ts(row) == 30 and row_first_from(row) == 10


def test_append_is_concatenation():
    row = encode_row(20, [10], [b"a"])
    appended = row_append(row, encode_entry(20, b"b") + encode_entry(30, None), 2, 30)
    assert decode_row(appended) == (30, [10, 20, 30], [b"a", b"b", None])
    assert decode_row(row_append(None, encode_entry(5, b""), 1, 9)) == (9, [5], [b""])


def test_find_in_row():
    row = encode_row(40, [10, 20, 30], [b"a", None, b""])
    assert find_in_row(row, 9) is None
    assert find_in_row(row, 10) == (10, 20, b"a")
    assert find_in_row(row, 19) == (10, 20, b"a")
    assert find_in_row(row, 25) == (20, 30, None)
    assert find_in_row(row, 39) == (30, 40, b"")
    assert find_in_row(row, 40) is None
    degenerate = encode_row(30, [10, 30], [b"a", None])  # newest tombstone at 30
    assert find_in_row(degenerate, 29) == (10, 30, b"a")
    assert find_in_row(degenerate, 30) is None


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10**6), st.none() | st.binary(max_size=20)), max_size=8,
             unique_by=lambda e: e[0]),
    st.integers(0, 10**6),
    st.integers(0, 2 * 10**6),
)
def test_round_trip_and_search(entries, extra, probe):
    entries.sort()
    froms = [f for f, _ in entries]
    values = [v for _, v in entries]
    next_ts = (froms[-1] if froms else 0) + extra
    row = encode_row(next_ts, froms, values)
    assert decode_row(row) == (next_ts, froms, values)
    expected = None
    for i, f in enumerate(froms):
        valid_to = froms[i + 1] if i + 1 < len(froms) else next_ts
        if f <= probe < valid_to:
            expected = (f, valid_to, values[i])
    assert find_in_row(row, probe) == expected
