"""tools/kafka/topics.py without a broker: what produce() hands the producer, and that a record
the broker refused fails the call instead of passing unnoticed."""

from __future__ import annotations

import pytest
from kafka.errors import MessageSizeTooLargeError
from kafka.future import Future

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
