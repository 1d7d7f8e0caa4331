"""The stream thread's log end offsets (where exactly-once restorations end) survive an admin
client that came out of an outage of every broker with stale metadata."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import KafkaConnectionError, UnknownBrokerIdError

from airflow_stateful_provider.streams.processing.kafka_waits import KafkaWaits


class Admin:
    """An admin client whose metadata may name a leader it has no address for."""

    def __init__(self, knows_the_leader: bool) -> None:
        self.knows_the_leader, self.closed = knows_the_leader, False

    def list_partition_offsets(self, specs):
        if not self.knows_the_leader:
            raise UnknownBrokerIdError(2)
        return {tp: SimpleNamespace(offset=52) for tp in specs}

    def close(self):
        self.closed = True


def test_an_admin_without_the_leaders_address_is_replaced_and_the_call_retried(thread):
    stale, fresh = Admin(knows_the_leader=False), Admin(knows_the_leader=True)
    admins = iter([stale, fresh])
    thread._admin_factory = lambda: next(admins)
    tp = KafkaTopicPartition("app-counts-changelog", 0)
    with pytest.raises(KafkaConnectionError, match=r"no address of broker 2 \(stale metadata\)") as raised:
        thread._log_end_offsets([tp])
    assert raised.value.retriable and stale.closed and thread._admin is None

    admins = iter([Admin(knows_the_leader=False), fresh])
    waits = KafkaWaits(60_000)  # as the changelog reader calls it: retried within the task timeout
    assert waits.retried("list_partition_offsets", "the changelogs' partition leaders", thread._log_end_offsets,
                         [tp]) == {tp: 52}
    assert thread._admin is fresh and not fresh.closed
