"""Metadata of a topic a client does not know yet is requested at once, refreshes of known
topics keep kafka-python's backoff, an update already pending does not wake the refresh loop
again (kafka/metadata_requests.py). On kafka-python's own ClusterMetadata, without a network
(its ``ttl`` is what the refresh loop waits; the loop and its wake-ups are stand-ins counting
calls). No broker: tests/integration/test_metadata_requests.py has the sender on one."""

from __future__ import annotations

import time

from kafka.cluster import ClusterMetadata
from kafka.future import Future

from airflow_stateful_provider.streams.kafka.metadata_requests import metadata_requests_paced


def just_refreshed(cluster: ClusterMetadata) -> ClusterMetadata:
    """As after a bootstrap or any answered refresh: nothing to update, the backoff running."""
    now = time.monotonic() * 1000
    cluster._need_update = False
    cluster._last_refresh_ms = cluster._last_successful_refresh_ms = now
    return cluster


def test_stock_kafka_python_holds_a_new_topic_for_the_backoff():
    """What the door works around: were this 0, the fix would be dead code."""
    cluster = just_refreshed(ClusterMetadata(retry_backoff_ms=100))
    cluster.add_topic("orders")
    assert cluster.ttl() > 50


def test_a_new_topic_is_requested_at_once_and_a_known_one_waits_the_backoff():
    cluster = ClusterMetadata(retry_backoff_ms=100)
    metadata_requests_paced(cluster)
    just_refreshed(cluster)
    cluster.add_topic("orders")
    assert cluster.ttl() == 0
    just_refreshed(cluster)
    cluster.add_topic("orders")  # known: nothing new to ask
    cluster.request_update()  # e.g. a leader moved: spaced by the backoff, as kafka-python does
    assert cluster.ttl() > 50
    just_refreshed(cluster)
    cluster.set_topics(["orders", "payments"])
    assert cluster.ttl() == 0 and cluster._topics == {"orders", "payments"}
    just_refreshed(cluster)
    cluster.set_topics(["payments"])  # fewer topics: nothing new
    assert cluster.ttl() > 50


def test_all_topics_are_requested_at_once_when_the_last_request_did_not_ask_for_them():
    cluster = ClusterMetadata(retry_backoff_ms=100)
    metadata_requests_paced(cluster)
    just_refreshed(cluster)
    cluster.need_all_topic_metadata = True  # a consumer's partitions_for_topic or topics()
    cluster.request_update()
    assert cluster.ttl() == 0
    just_refreshed(cluster)
    cluster.request_update()  # all topics again (a pattern subscription): the backoff holds
    assert cluster.ttl() > 50
    cluster.need_all_topic_metadata = False
    just_refreshed(cluster)
    cluster.request_update()
    assert cluster.ttl() > 50
    cluster.need_all_topic_metadata = True
    cluster.request_update()
    assert cluster.ttl() == 0


def test_installed_once():
    cluster = ClusterMetadata()
    metadata_requests_paced(cluster)
    add_topic = cluster.add_topic
    metadata_requests_paced(cluster)
    assert cluster.add_topic is add_topic


class LoopStandIn:
    """What ``request_update`` touches of an attached client: the loop it starts, its wake-up."""

    def __init__(self) -> None:
        self.started = self.notified = 0

    def call_soon(self, _loop) -> Future:
        self.started += 1
        return Future()

    def notify(self) -> None:
        self.notified += 1

    def connection_delay(self, _node) -> float:
        return 0  # no failed refresh backing off


def attached(cluster: ClusterMetadata) -> LoopStandIn:
    stand_in = LoopStandIn()
    cluster._manager = cluster._wakeup = stand_in
    return stand_in


def test_a_pending_update_wakes_the_loop_once():
    cluster = ClusterMetadata(retry_backoff_ms=100)
    metadata_requests_paced(cluster)
    loop = attached(just_refreshed(cluster))
    first = cluster.request_update()
    assert (loop.started, loop.notified) == (1, 1)
    assert cluster.request_update() is first and cluster.request_update() is first
    assert loop.notified == 1  # e.g. a sender's passes while a batch waits for a leader
    first.success(cluster)  # as an answered refresh ends it (update_metadata)
    cluster._future = None
    cluster.request_update()
    assert loop.notified == 2


def test_a_new_topic_wakes_the_loop_though_an_update_is_pending():
    """Its request goes at once: the loop sleeping out the backoff must recompute its wait."""
    cluster = ClusterMetadata(retry_backoff_ms=100)
    metadata_requests_paced(cluster)
    loop = attached(just_refreshed(cluster))
    cluster.request_update()
    cluster.add_topic("orders")
    assert loop.notified == 2 and cluster.ttl() == 0
    cluster.request_update()
    assert loop.notified == 2


def test_an_ended_loop_is_woken_and_restarted():
    """A loop that ended (failed_metadata_refresh.py restarts it) sleeps on nothing: signal."""
    cluster = ClusterMetadata(retry_backoff_ms=100)
    metadata_requests_paced(cluster)
    loop = attached(just_refreshed(cluster))
    cluster.request_update()
    cluster._refresh_loop_future.success(None)
    cluster._refresh_loop_future = None  # as restart_refresh_loop_after_failure leaves it
    cluster.request_update()
    assert (loop.started, loop.notified) == (2, 2)
