"""Metadata for a topic a client does not know yet is requested at once, as the Java clients do.

kafka-python 3.0.12 sends no metadata request sooner than ``retry_backoff_ms`` (100 ms) after
the last one, whatever it asked for (``ClusterMetadata.ttl``). Right after a client's
bootstrap, or the refresh its consumer coordinator asks for when it is made, the first
request naming a topic (a consumer's ``partitions_for_topic`` or assignment, a producer's
first send to a topic) therefore waits up to 100 ms. An instance start opens a handful of
clients one after the other (the status read, the topology record, the control listener, the
query responder, the stream thread's consumer and producer), each paying it. The Java client
lets such a request go at once (``Metadata.requestUpdateForNewTopics`` forgets the last
refresh time); here too. Refreshes of topics already known keep the backoff, so a topic
whose leader is missing is not asked about in a tight loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["new_topics_requested_at_once"]


def new_topics_requested_at_once(cluster: Any) -> None:
    """Make ``cluster`` (a ``ClusterMetadata``) request metadata at once when a topic it does
    not track is added, or when all topics are asked for and the last request did not ask
    for them. Checked against kafka-python 3.0.12: ``add_topic`` and ``set_topics`` call
    ``request_update`` on a new topic, a consumer's ``partitions_for_topic`` and ``topics``
    set ``need_all_topic_metadata`` around theirs, and ``ttl`` waits until
    ``_last_refresh_ms + retry_backoff_ms``."""
    if getattr(cluster, "_requests_new_topics_at_once", False) or not hasattr(cluster, "_last_refresh_ms"):
        return
    add_topic, set_topics, request_update = cluster.add_topic, cluster.set_topics, cluster.request_update
    asked_for_all = False

    def forget_last_refresh() -> None:
        cluster._last_refresh_ms = 0

    def add_new_topic_at_once(topic: str) -> Any:
        if topic not in cluster._topics:
            forget_last_refresh()
        return add_topic(topic)

    def set_new_topics_at_once(topics: Iterable[str]) -> Any:
        topics = list(topics)
        if set(topics) - cluster._topics:
            forget_last_refresh()
        return set_topics(topics)

    def request_all_topics_at_once() -> Any:
        nonlocal asked_for_all
        wants_all = bool(cluster.need_all_topic_metadata)
        if wants_all and not asked_for_all:
            forget_last_refresh()
        asked_for_all = wants_all
        return request_update()

    cluster.add_topic = add_new_topic_at_once
    cluster.set_topics = set_new_topics_at_once
    cluster.request_update = request_all_topics_at_once
    cluster._requests_new_topics_at_once = True
