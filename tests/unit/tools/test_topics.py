"""tools/kafka/topics.py without a broker: what produce() hands the producer, and that a record
the broker refused fails the call instead of passing unnoticed."""

from __future__ import annotations

import pytest
from kafka import TopicPartition
from kafka.errors import GroupAuthorizationFailedError, KafkaConnectionError, MessageSizeTooLargeError
from kafka.future import Future
from kafka.structs import OffsetAndMetadata

from tools.kafka import topics


class FakeProducer:
    """Records sends; at flush, fails the records whose value is in ``refuse``."""

    instances: list[FakeProducer] = []

    def __init__(self, refuse: tuple[bytes, ...] = (), **configs) -> None:
        self.configs, self.refuse = configs, refuse
        self.sent: list[tuple] = []
        self.pending: list[tuple[Future, bytes | None]] = []
        self.closed = False
        FakeProducer.instances.append(self)

    def send(self, topic, key=None, value=None, partition=None, timestamp_ms=None) -> Future:
        self.sent.append((topic, key, value, partition, timestamp_ms))
        future = Future()
        self.pending.append((future, value))
        return future

    def flush(self) -> None:
        for future, value in self.pending:
            if value in self.refuse:
                future.failure(MessageSizeTooLargeError(f"{len(value)} bytes"))
            else:
                future.success(None)
        self.pending = []

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def producers(monkeypatch):
    FakeProducer.instances = []
    monkeypatch.setattr(topics, "KafkaProducer", FakeProducer)
    return FakeProducer.instances


def test_produce_encodes_keys_and_values_and_passes_partition_timestamps_and_settings(producers):
    sent = topics.produce("b:9092", "t", [("k1", "v1"), (b"k2", None, 7), (None, b"v3")], partition=2, linger_ms=5)
    (producer,) = producers
    assert sent == 3
    assert producer.sent == [("t", b"k1", b"v1", 2, None), ("t", b"k2", None, 2, 7), ("t", None, b"v3", 2, None)]
    assert producer.configs == {"bootstrap_servers": "b:9092", "linger_ms": 5}
    assert producer.closed


def test_a_refused_record_fails_the_call_naming_how_many_and_a_key(producers, monkeypatch):
    monkeypatch.setattr(topics, "KafkaProducer", lambda **configs: FakeProducer(refuse=(b"huge",), **configs))
    with pytest.raises(AssertionError, match=r"1 of 3 records were not written to t, e.g. the one with key 'k2': "
                                             r"MessageSizeTooLargeError"):
        topics.produce("b:9092", "t", [("k1", "v"), ("k2", "huge"), ("k3", "v")])
    assert producers[0].closed
    assert [record[1] for record in producers[0].sent] == [b"k1", b"k2", b"k3"]  # the others were sent


def test_numbered_records_are_keyed_over_keys_with_the_number_in_the_value():
    assert list(topics.numbered_records(8, 3, 5, key_digits=4)) == [
        ("k0003", '{"n": 8}'), ("k0004", '{"n": 9}'), ("k0000", '{"n": 10}')]
    assert list(topics.numbered_records(0, 2, 50)) == [("k0", '{"n": 0}'), ("k1", '{"n": 1}')]


class FakeAdmin:
    """Answers list_group_offsets from ``answers`` (a dict of offsets by partition, or an exception)."""

    answers: list = []
    instances: list[FakeAdmin] = []

    def __init__(self, **configs) -> None:
        self.configs, self.closed, self.asked = configs, False, 0
        FakeAdmin.instances.append(self)

    def list_group_offsets(self, groups):
        self.asked += 1
        answer = FakeAdmin.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        (group,) = groups
        return {group: {TopicPartition("t", p): OffsetAndMetadata(o, "", -1) for p, o in answer.items()}}

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def admins(monkeypatch):
    FakeAdmin.answers, FakeAdmin.instances = [], []
    monkeypatch.setattr(topics, "KafkaAdminClient", FakeAdmin)
    monkeypatch.setattr(topics, "_kept_admins", {})
    return FakeAdmin


def test_committed_offsets_keeps_a_client_that_answered_and_replaces_one_that_did_not(admins):
    admins.answers = [{0: 5, 1: 7}, {0: 6, 1: 7}, KafkaConnectionError("lost"), {0: 9},
                      GroupAuthorizationFailedError("denied"), {0: 10}]
    assert topics.committed_offsets("b:9092", "g", "t") == {0: 5, 1: 7}
    assert topics.committed_offsets("b:9092", "g", "t") == {0: 6, 1: 7}
    first = admins.instances[0]
    assert (len(admins.instances), first.asked, first.closed) == (1, 2, False)  # asked again, kept
    # no answer (a retriable error reads as no offsets): perhaps a coordinator that moved,
    # which kafka-python's admin would keep asking
    assert topics.committed_offsets("b:9092", "g", "t") == {}
    assert first.closed
    assert topics.committed_offsets("b:9092", "g", "t") == {0: 9}
    with pytest.raises(GroupAuthorizationFailedError):
        topics.committed_offsets("b:9092", "g", "t")
    assert admins.instances[1].closed
    assert topics.committed_offsets("b:9092", "g", "t") == {0: 10}
    assert len(admins.instances) == 3 and not admins.instances[2].closed
    assert topics._kept_admins == {"b:9092": admins.instances[2]}
    topics.close_kept_admins("a:9092")  # another broker's
    assert not admins.instances[2].closed
    topics.close_kept_admins("b:9092")
    assert admins.instances[2].closed and topics._kept_admins == {}


def test_committed_offsets_of_two_addresses_keep_two_clients(admins):
    admins.answers = [{0: 1}, {0: 2}, {0: 3}, {0: 4}]
    topics.committed_offsets("a:9092", "g", "t")
    topics.committed_offsets("b:9092", "g", "t")
    assert topics.committed_offsets("a:9092", "g", "t") == {0: 3}
    topics.committed_offsets("c:9092,d:9092", "g", "t")
    assert [(admin.configs["bootstrap_servers"], admin.asked) for admin in admins.instances] == [
        ("a:9092", 2), ("b:9092", 1), ("c:9092,d:9092", 1)]
    topics.close_kept_admins("d:9092,e:9092")  # a cluster stopping: any client bootstrapping from one of its nodes
    assert [admin.closed for admin in admins.instances] == [False, False, True]
    topics.close_kept_admins()
    assert [admin.closed for admin in admins.instances] == [True, True, True]
