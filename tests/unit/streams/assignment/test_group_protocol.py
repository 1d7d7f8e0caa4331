"""The streams group protocol codec: SubscriptionInfo and AssignmentInfo (docs/group-protocol.md).

Pins the v1 byte layout, round trips, version rules (a newer version is refused with both
versions named; the dispatch table lets older versions keep decoding once v2 exists) and
precise errors for bad values and damaged data.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from kafka.structs import TopicPartition as TP

from airflow_stateful_provider.streams.assignment import (
    assignment_info as assignment_module,
)
from airflow_stateful_provider.streams.assignment import (
    subscription_info as subscription_module,
)
from airflow_stateful_provider.streams.assignment.assignment_info import AssignmentInfo, AssignorError
from airflow_stateful_provider.streams.assignment.group_protocol import (
    LATEST_SUPPORTED_VERSION,
    ProtocolReader,
    ProtocolWriter,
    peek_versions,
)
from airflow_stateful_provider.streams.assignment.subscription_info import SubscriptionInfo
from airflow_stateful_provider.streams.errors import GroupProtocolError, UnsupportedGroupProtocolVersionError
from airflow_stateful_provider.streams.task_id import TaskId

PID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def t(text: str) -> TaskId:
    return TaskId.parse(text)


def full_subscription(**overrides) -> SubscriptionInfo:
    fields = dict(
        process_id=PID,
        previous_active_tasks={t("0_0"), t("0_1"), t("2_3")},
        previous_standby_tasks={t("1_0")},
        task_offset_sums={t("0_0"): -2, t("0_1"): -2, t("1_0"): 1234, t("3_7"): -3, t("2_3"): 2**62},
        client_tags={"zone": "eu-1a", "rack": "r7"},
        endpoint="host-1.example:8080",
        error_code=0,
        unique_field=255,
    )
    fields.update(overrides)
    return SubscriptionInfo(**fields)


def full_assignment(**overrides) -> AssignmentInfo:
    fields = dict(
        active_tasks={t("0_0"): {TP("clicks", 0)}, t("1_2"): {TP("app-rep-repartition", 2), TP("pay", 2)}},
        standby_tasks={t("0_1"): {TP("app-s-changelog", 1)}, t("0_3"): {TP("app-s-changelog", 3)}},
        warmup_tasks={t("0_3")},
        partitions_by_host={"a:1": {TP("clicks", 0)}, "b:2": {TP("clicks", 1), TP("pay", 2)}},
        standby_partitions_by_host={"b:2": {TP("clicks", 0)}},
        next_rebalance_ms=1_700_000_000_000,
        error_code=AssignorError.NONE,
    )
    fields.update(overrides)
    return AssignmentInfo(**fields)


# ---------------------------------------------------------------------------- round trips


def test_subscription_round_trip_keeps_every_field():
    info = full_subscription()
    decoded = SubscriptionInfo.decode(info.encode())
    assert decoded == info
    assert decoded.version == decoded.latest_supported_version == LATEST_SUPPORTED_VERSION
    assert decoded.task_offset_sums[t("3_7")] == -3


def test_empty_subscription_round_trip():
    info = SubscriptionInfo(PID)
    assert SubscriptionInfo.decode(info.encode()) == info


def test_assignment_round_trip_keeps_every_field():
    info = full_assignment()
    decoded = AssignmentInfo.decode(info.encode())
    assert decoded == info
    assert decoded.hot_standby_tasks == {t("0_1")}
    assert decoded.active_partitions == {TP("clicks", 0), TP("app-rep-repartition", 2), TP("pay", 2)}
    assert decoded.error is AssignorError.NONE
    assert decoded.followup_rebalance_requested


def test_empty_assignment_round_trip():
    info = AssignmentInfo(error_code=AssignorError.INCOMPLETE_SOURCE_TOPIC_METADATA)
    decoded = AssignmentInfo.decode(info.encode())
    assert decoded == info and decoded.next_rebalance_ms == -1 and not decoded.followup_rebalance_requested


def test_unknown_error_code_survives_decoding():
    assert AssignmentInfo.decode(AssignmentInfo(error_code=99).encode()).error == 99


# ---------------------------------------------------------------------------- byte layout


def test_subscription_v1_bytes_are_as_documented():
    info = SubscriptionInfo(
        PID, previous_active_tasks={t("0_1")}, previous_standby_tasks=set(),
        task_offset_sums={t("0_1"): -2}, client_tags={"z": "a"}, endpoint="h:1", error_code=0, unique_field=7,
    )
    expected = (
        struct.pack(">ii", 1, 1) + PID.bytes
        + struct.pack(">iiii", 1, 0, 1, 1)            # previous active: 1 group, sub 0, 1 partition: 1
        + struct.pack(">i", 0)                         # previous standby: no groups
        + struct.pack(">iiiiq", 1, 0, 1, 1, -2)        # offset sums: sub 0, partition 1 -> -2
        + struct.pack(">H", 3) + b"h:1"                # endpoint
        + struct.pack(">i", 1) + struct.pack(">H", 1) + b"z" + struct.pack(">H", 1) + b"a"
        + struct.pack(">i", 0)                         # error code
        + struct.pack(">B", 7)                         # unique field
    )
    assert info.encode() == expected


def test_assignment_v1_bytes_are_as_documented():
    info = AssignmentInfo(
        active_tasks={t("0_1"): {TP("in", 1)}}, standby_tasks={t("0_0"): {TP("app-s-changelog", 0)}},
        warmup_tasks={t("0_0")}, partitions_by_host={"h:1": {TP("in", 1)}}, standby_partitions_by_host={},
        next_rebalance_ms=5, error_code=0,
    )
    expected = (
        struct.pack(">ii", 1, 1)
        + struct.pack(">i", 2) + struct.pack(">H", 15) + b"app-s-changelog" + struct.pack(">H", 2) + b"in"
        + struct.pack(">iii", 1, 0, 1) + struct.pack(">iii", 1, 1, 1)      # active 0_1 -> [in-1]
        + struct.pack(">iii", 1, 0, 0) + struct.pack(">iii", 1, 0, 0)      # standby 0_0 -> [changelog-0]
        + struct.pack(">iiii", 1, 0, 1, 0)                                 # warmups {0_0}
        + struct.pack(">i", 1) + struct.pack(">H", 3) + b"h:1" + struct.pack(">iii", 1, 1, 1)
        + struct.pack(">i", 0)                                             # no standby hosts
        + struct.pack(">q", 5) + struct.pack(">i", 0)
    )
    assert info.encode() == expected


def test_task_sets_are_grouped_by_subtopology():
    writer = ProtocolWriter()
    writer.task_set("tasks", [t("1_0"), t("0_2"), t("1_3"), t("0_0")])
    assert writer.to_bytes() == struct.pack(">i" + "iiii" + "iiii", 2, 0, 2, 0, 2, 1, 2, 0, 3)
    assert ProtocolReader(writer.to_bytes(), "x").task_set("tasks") == {t("1_0"), t("0_2"), t("1_3"), t("0_0")}


# ---------------------------------------------------------------------------- versions


def future_bytes(version: int, latest: int | None = None) -> bytes:
    """Data of a newer release: our header, a body we cannot know."""
    return struct.pack(">ii", version, latest or version) + b"\x00\x01whatever-v2-adds"


@pytest.mark.parametrize("cls, what", [(SubscriptionInfo, "subscription data"), (AssignmentInfo, "assignment data")])
def test_newer_version_is_refused_naming_both_versions(cls, what):
    with pytest.raises(UnsupportedGroupProtocolVersionError) as caught:
        cls.decode(future_bytes(2, 3))
    message = str(caught.value)
    assert f"{what} has version 2" in message and "supports up to 3" in message
    assert "supports versions 1 to 1" in message
    assert caught.value.received_version == 2 and caught.value.latest_supported_version == 1
    assert isinstance(caught.value, GroupProtocolError)


def test_header_of_a_newer_version_can_be_peeked():
    assert peek_versions(future_bytes(4, 6)) == (4, 6)


@pytest.mark.parametrize("cls", [SubscriptionInfo, AssignmentInfo])
def test_version_zero_is_malformed(cls):
    with pytest.raises(GroupProtocolError, match="used_version must be >= 1, got 0"):
        cls.decode(struct.pack(">ii", 0, 1))


def test_adding_a_version_keeps_older_data_decodable(monkeypatch):
    """Simulate the next release: v2 = v1 + a trailing int32 ``capacity_hint``. v1 data of
    older members still decodes through the v1 decoder; v2 data through v2; v3 is refused."""
    decoded_v2 = []

    def encode_v2(info, w):
        subscription_module._encode_v1(info, w)
        w.i32("capacity_hint", 4)

    def decode_v2(r, used, latest):
        info = subscription_module._decode_v1(r, used, latest)
        decoded_v2.append(r.i32("capacity_hint"))
        return info

    monkeypatch.setitem(subscription_module._ENCODERS, 2, encode_v2)
    monkeypatch.setitem(subscription_module._DECODERS, 2, decode_v2)
    old = full_subscription()  # written by a v1 member
    assert SubscriptionInfo.decode(old.encode()) == old and decoded_v2 == []
    new = full_subscription(version=2, latest_supported_version=2)
    assert SubscriptionInfo.decode(new.encode()).version == 2 and decoded_v2 == [4]
    with pytest.raises(UnsupportedGroupProtocolVersionError, match="version 3 .* supports versions 1 to 2"):
        SubscriptionInfo.decode(future_bytes(3))


def test_encoding_a_version_this_build_cannot_write_is_refused():
    with pytest.raises(GroupProtocolError, match=r"cannot encode SubscriptionInfo version 2; this build writes \[1\]"):
        full_subscription(version=2, latest_supported_version=2).encode()
    with pytest.raises(GroupProtocolError, match=r"cannot encode AssignmentInfo version 3"):
        full_assignment(version=3, latest_supported_version=3).encode()


def test_assignment_dispatch_is_extensible_too(monkeypatch):
    monkeypatch.setitem(assignment_module._DECODERS, 2, assignment_module._decode_v1)
    data = bytearray(full_assignment().encode())
    data[0:4] = struct.pack(">i", 2)
    assert AssignmentInfo.decode(bytes(data)).version == 2


# ---------------------------------------------------------------------------- damaged data


@pytest.mark.parametrize("cls, info", [(SubscriptionInfo, full_subscription()), (AssignmentInfo, full_assignment())])
def test_truncated_data_names_field_and_offset(cls, info):
    data = info.encode()
    for cut in (4, 9, len(data) // 2, len(data) - 1):
        with pytest.raises(GroupProtocolError, match=r"truncated: .* \(at byte \d+ of \d+\)"):
            cls.decode(data[:cut])


@pytest.mark.parametrize("cls, info", [(SubscriptionInfo, full_subscription()), (AssignmentInfo, full_assignment())])
def test_trailing_bytes_are_refused(cls, info):
    with pytest.raises(GroupProtocolError, match="3 unexpected trailing bytes"):
        cls.decode(info.encode() + b"abc")


def test_non_bytes_and_bad_topic_index_are_refused():
    with pytest.raises(GroupProtocolError, match="subscription data must be bytes, got str"):
        SubscriptionInfo.decode("nope")  # type: ignore[arg-type]
    data = bytearray(AssignmentInfo(active_tasks={t("0_0"): {TP("in", 0)}}).encode())
    # topic dictionary: ["in"]; the active task's partition refers to index 0 -> make it 5
    index_at = data.index(struct.pack(">iii", 1, 0, 0)) + 12 + 4
    data[index_at:index_at + 4] = struct.pack(">i", 5)
    with pytest.raises(GroupProtocolError, match="topic index 5, the dictionary has 1"):
        AssignmentInfo.decode(bytes(data))


def test_invalid_utf8_is_refused():
    data = bytearray(SubscriptionInfo(PID, endpoint="h:1").encode())
    at = data.index(b"h:1")
    data[at] = 0xFF
    with pytest.raises(GroupProtocolError, match="endpoint is not UTF-8"):
        SubscriptionInfo.decode(bytes(data))


# ---------------------------------------------------------------------------- bad values


@pytest.mark.parametrize("overrides, message", [
    ({"process_id": "p1"}, "process_id must be a uuid.UUID, got str 'p1'"),
    ({"previous_active_tasks": ["0_1"]}, "previous_active_tasks must hold TaskId objects, got str '0_1'"),
    ({"previous_standby_tasks": {TaskId(0, 0)}}, r"both previous active and previous standby: \['0_0'\]"),
    ({"task_offset_sums": {TaskId(0, 0): -5}}, "offset sum of task 0_0 must be an int >= 0, -2 .* got -5"),
    ({"task_offset_sums": {TaskId(0, 0): 1.5}}, "offset sum of task 0_0 .* got 1.5"),
    ({"client_tags": {"zone": 1}}, "client_tags must map str to str, got 'zone': 1"),
    ({"endpoint": "localhost"}, "endpoint must look like 'host:port' .* got 'localhost'"),
    ({"endpoint": "h:99999"}, "got 'h:99999'"),
    ({"unique_field": 256}, r"unique_field must be an int in \[0, 255\], got 256"),
    ({"version": 2, "latest_supported_version": 1},
     r"latest_supported_version \(1\) is older than the used version \(2\)"),
])
def test_subscription_values_are_checked(overrides, message):
    with pytest.raises(GroupProtocolError, match=message):
        full_subscription(**overrides)


@pytest.mark.parametrize("overrides, message", [
    ({"warmup_tasks": {TaskId(0, 0)}}, r"warmup_tasks must be standby tasks too; not standbys: \['0_0'\]"),
    ({"standby_tasks": {TaskId(0, 0): {TP("c", 0)}}, "warmup_tasks": set()},
     r"tasks cannot be both active and standby: \['0_0'\]"),
    ({"active_tasks": {TaskId(0, 0): {("clicks", -1)}}}, r"active_tasks\[0_0\] must hold TopicPartition.*-1"),
    ({"partitions_by_host": {"": set()}}, "partitions_by_host keys must be non-empty"),
    ({"next_rebalance_ms": -2}, r"next_rebalance_ms must be an int in \[-1, "),
    ({"active_tasks": {"0_0": set()}}, "active_tasks keys must be TaskId, got str '0_0'"),
])
def test_assignment_values_are_checked(overrides, message):
    with pytest.raises(GroupProtocolError, match=message):
        full_assignment(**overrides)


def test_too_long_string_names_the_field():
    with pytest.raises(GroupProtocolError, match="client tag 'k' is 70000 bytes in UTF-8, at most 65535"):
        full_subscription(client_tags={"k": "x" * 70_000}).encode()
