"""Metadata of a topic a client does not know yet is requested at once, refreshes of known
topics keep kafka-python's backoff (kafka/new_topic_metadata.py). On kafka-python's own
ClusterMetadata, without a network (its ``ttl`` is what the refresh loop waits). No broker."""

from __future__ import annotations

import time

from kafka.cluster import ClusterMetadata

from airflow_stateful_provider.streams.kafka.new_topic_metadata import new_topics_requested_at_once


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
    new_topics_requested_at_once(cluster)
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
    new_topics_requested_at_once(cluster)
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
    new_topics_requested_at_once(cluster)
    add_topic = cluster.add_topic
    new_topics_requested_at_once(cluster)
    assert cluster.add_topic is add_topic
