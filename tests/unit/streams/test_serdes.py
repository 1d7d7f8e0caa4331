"""Built-in serdes: round trips, tombstones, precise errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_stateful_provider.streams.errors import SerializationError
from airflow_stateful_provider.streams.serdes import (
    BytesSerde,
    Int64Serde,
    JsonSerde,
    Serde,
    Serdes,
    StringSerde,
    get_serde,
    serde_name,
)

ALL = [Serdes.bytes(), Serdes.string(), Serdes.int64(), Serdes.json()]


@pytest.mark.parametrize("serde", ALL, ids=lambda s: s.name)
def test_none_is_the_tombstone_both_ways(serde):
    assert serde.serialize(None) is None
    assert serde.deserialize(None) is None
    assert isinstance(serde, Serde)


@pytest.mark.parametrize("name", ["bytes", "string", "int64", "json"])
def test_get_serde_by_recorded_name(name):
    serde = get_serde(name)
    assert serde.name == name
    assert serde_name(serde) == name
    assert serde_name(name) == name


def test_unknown_serde_name():
    with pytest.raises(SerializationError, match="unknown serde name 'avro'"):
        get_serde("avro")
    with pytest.raises(SerializationError, match="not a serde"):
        serde_name(42)


def test_custom_serde_names():
    class Upper:
        def serialize(self, value):
            return value.upper().encode()

        def deserialize(self, data):
            return data.decode()

    class Named(Upper):
        name = "upper"

    assert serde_name(Named()) == "upper"
    assert serde_name(Upper()).endswith("Upper")


def test_int64_is_eight_bytes_big_endian():
    serde = Int64Serde()
    assert serde.serialize(1) == b"\x00" * 7 + b"\x01"
    assert serde.serialize(-1) == b"\xff" * 8
    assert serde.serialize(2**63 - 1) == b"\x7f" + b"\xff" * 7
    assert serde.deserialize(b"\x80" + b"\x00" * 7) == -(2**63)


@pytest.mark.parametrize(
    "value, match",
    [
        (2**63, "does not fit"),
        (-(2**63) - 1, "does not fit"),
        (True, "got bool True"),
        (1.5, "got float 1.5"),
        ("7", "got str '7'"),
    ],
)
def test_int64_rejects(value, match):
    with pytest.raises(SerializationError, match=f"serde 'int64'.*{match}"):
        Int64Serde().serialize(value)


def test_int64_needs_exactly_eight_bytes():
    with pytest.raises(SerializationError, match=r"serde 'int64' needs exactly 8 bytes, got 3: b'abc'"):
        Int64Serde().deserialize(b"abc")


def test_string_is_utf8():
    serde = StringSerde()
    assert serde.serialize("héllo") == "héllo".encode()
    assert serde.deserialize("héllo".encode()) == "héllo"
    with pytest.raises(SerializationError, match=r"serde 'string' cannot decode b'\\xff' as UTF-8"):
        serde.deserialize(b"\xff")
    with pytest.raises(SerializationError, match="serde 'string' can only serialize str, got int 5"):
        serde.serialize(5)
    with pytest.raises(SerializationError, match="cannot encode"):
        serde.serialize("\ud800")


def test_bytes_serde():
    serde = BytesSerde()
    assert serde.serialize(bytearray(b"ab")) == b"ab"
    assert serde.deserialize(memoryview(b"ab")) == b"ab"
    with pytest.raises(SerializationError, match="serde 'bytes' can only serialize bytes, got str 'x'"):
        serde.serialize("x")


def test_json_serde():
    serde = JsonSerde()
    assert serde.serialize({"a": [1, 2], "b": "é"}) == '{"a":[1,2],"b":"é"}'.encode()
    assert serde.deserialize(b'{"a":1}') == {"a": 1}
    with pytest.raises(SerializationError, match="serde 'json' cannot serialize"):
        serde.serialize({1, 2})
    with pytest.raises(SerializationError, match="serde 'json' cannot serialize"):
        serde.serialize(float("nan"))
    with pytest.raises(SerializationError, match="serde 'json' cannot deserialize b'{nope'"):
        serde.deserialize(b"{nope")


def test_long_bad_values_are_truncated_in_messages():
    with pytest.raises(SerializationError) as info:
        Int64Serde().deserialize(b"x" * 10_000)
    assert len(str(info.value)) < 200


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=10,
)


@settings(max_examples=100, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1), st.text(), st.binary(), json_values)
def test_round_trips(number, text, data, doc):
    assert Int64Serde().deserialize(Int64Serde().serialize(number)) == number
    assert StringSerde().deserialize(StringSerde().serialize(text)) == text
    assert BytesSerde().deserialize(BytesSerde().serialize(data)) == data
    if doc is not None:
        assert JsonSerde().deserialize(JsonSerde().serialize(doc)) == doc


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**63 - 1), min_size=2, max_size=10))
def test_int64_preserves_order_of_non_negative_numbers(numbers):
    # why big-endian: the byte order of serialized keys sorts like the numbers (for >= 0)
    serde = Int64Serde()
    assert sorted(numbers) == [serde.deserialize(b) for b in sorted(serde.serialize(n) for n in numbers)]
