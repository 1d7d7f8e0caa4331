"""When a client's metadata refresh loop is woken: at once for a topic it does not know yet, as
the Java clients do, and not again for an update it was already woken for.

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

Each ``request_update`` also wakes the refresh loop through the client's selector. A
producer's sender asks for an update on every pass while a batch waits for a partition
without a leader (a broker down, a topic deleted under it), and the wake-up ends its own
wait on that selector at once: the sender then spins, a core's worth, until the leader is
back or the batch expires. An update already requested, with the loop alive and woken for
it, is not signalled again; the loop's own backoff timer paces the sender instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["metadata_requests_paced"]


def metadata_requests_paced(cluster: Any) -> None:
    """Make ``cluster`` (a ``ClusterMetadata``) request metadata at once when a topic it does
    not track is added, or when all topics are asked for and the last request did not ask
    for them; and skip the wake-up of a ``request_update`` whose update is already pending.
    Checked against kafka-python 3.0.12: ``add_topic`` and ``set_topics`` call
    ``request_update`` on a new topic, a consumer's ``partitions_for_topic`` and ``topics``
    set ``need_all_topic_metadata`` around theirs, ``ttl`` waits until
    ``_last_refresh_ms + retry_backoff_ms``, ``request_update`` sets ``_need_update`` and a
    pending ``_future`` and notifies the loop (``_refresh_loop_future``), and an answered or
    failed refresh ends that future."""
    if getattr(cluster, "_metadata_requests_paced", False) or not hasattr(cluster, "_last_refresh_ms"):
        return
    add_topic, set_topics, request_update = cluster.add_topic, cluster.set_topics, cluster.request_update
    asked_for_all = False
    wait_shortened = False  # the loop must recompute its wait: signal it even if pending

    def forget_last_refresh() -> None:
        nonlocal wait_shortened
        cluster._last_refresh_ms = 0
        wait_shortened = True

    def add_new_topic_at_once(topic: str) -> Any:
        if topic not in cluster._topics:
            forget_last_refresh()
        return add_topic(topic)

    def set_new_topics_at_once(topics: Iterable[str]) -> Any:
        topics = list(topics)
        if set(topics) - cluster._topics:
            forget_last_refresh()
        return set_topics(topics)

    def loop_already_woken() -> Any:
        """The pending update's future when the loop was woken for it and still runs, else None."""
        pending, loop = cluster._future, getattr(cluster, "_refresh_loop_future", None)
        if not cluster._need_update or pending is None or pending.is_done or loop is None or loop.is_done:
            return None
        return pending

    def request_update_paced() -> Any:
        nonlocal asked_for_all, wait_shortened
        wants_all = bool(cluster.need_all_topic_metadata)
        if wants_all and not asked_for_all:
            forget_last_refresh()
        asked_for_all = wants_all
        pending = None if wait_shortened else loop_already_woken()
        if pending is not None:
            return pending
        wait_shortened = False
        return request_update()

    cluster.add_topic = add_new_topic_at_once
    cluster.set_topics = set_new_topics_at_once
    cluster.request_update = request_update_paced
    cluster._metadata_requests_paced = True
