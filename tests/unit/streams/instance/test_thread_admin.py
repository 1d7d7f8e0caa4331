"""The stream thread's admin client: one for all its parts, created on first use; its log end
offsets (where exactly-once restorations end) survive a client that came out of an outage of
every broker with stale metadata."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import KafkaConnectionError, UnknownBrokerIdError

from airflow_stateful_provider.streams.errors import IllegalStateError
from airflow_stateful_provider.streams.instance.thread_admin import ThreadAdmin
from airflow_stateful_provider.streams.instance.topic_watch import TopicWatch
from airflow_stateful_provider.streams.processing.kafka_waits import KafkaWaits


class Admin:
    """An admin client whose metadata may name a leader it has no address for."""

    def __init__(self, knows_the_leader: bool) -> None:
        self.knows_the_leader, self.closed = knows_the_leader, False

    def list_partition_offsets(self, specs):
        if not self.knows_the_leader:
            raise UnknownBrokerIdError(2)
        return {tp: SimpleNamespace(offset=52) for tp in specs}

    def list_topics(self):
        return ["app-input"]

    def close(self):
        self.closed = True


def test_an_admin_without_the_leaders_address_is_replaced_and_the_call_retried():
    stale, fresh = Admin(knows_the_leader=False), Admin(knows_the_leader=True)
    admins = iter([stale, fresh])
    admin = ThreadAdmin(lambda: next(admins), "app-StreamThread-0")
    tp = KafkaTopicPartition("app-counts-changelog", 0)
    with pytest.raises(KafkaConnectionError, match=r"no address of broker 2 \(stale metadata\)") as raised:
        admin.log_end_offsets([tp])
    assert raised.value.retriable and stale.closed

    admins = iter([Admin(knows_the_leader=False), fresh])
    waits = KafkaWaits(60_000)  # as the changelog reader calls it: retried within the task timeout
    assert waits.retried("list_partition_offsets", "the changelogs' partition leaders", admin.log_end_offsets,
                         [tp]) == {tp: 52}
    assert admin.client() is fresh and not fresh.closed


def test_the_topic_watch_and_the_offsets_share_one_client_made_on_first_use():
    made = []
    admin = ThreadAdmin(lambda: made.append(Admin(knows_the_leader=True)) or made[-1], "app-StreamThread-0")
    watch = TopicWatch({"app-input": "source", "app-output": "sink"}, admin, "app-StreamThread-0")
    assert made == []
    assert watch.missing() == {"app-output": "sink"}
    assert admin.log_end_offsets([KafkaTopicPartition("app-output", 0)])
    assert len(made) == 1
    admin.close()
    assert made[0].closed


def test_a_thread_without_an_admin_says_so_and_its_topic_watch_cannot_tell():
    admin = ThreadAdmin(None, "app-StreamThread-0")
    assert not admin.available
    assert TopicWatch({"app-input": "source"}, admin, "app-StreamThread-0").missing() is None
    with pytest.raises(IllegalStateError, match="app-StreamThread-0: this thread was given no admin client"):
        admin.client()
