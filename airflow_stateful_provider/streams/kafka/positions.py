"""A consumer's position and lag in a partition, read from its local state.

A task asks where the main consumer stands in a partition whose buffered records it has all
processed (processing/task.py), possibly inside a rebalance callback, which runs on the
consumer's IO thread while the stream thread waits in ``poll()``. The status collector asks
for the input lag from the status publisher's thread, while the stream thread polls: only
local state is read, nothing over the network.
"""

from __future__ import annotations

from typing import Any

from kafka import TopicPartition as KafkaTopicPartition

__all__ = ["local_lag", "local_position"]


def local_position(consumer: Any, topic: str, partition: int) -> int | None:
    """``consumer``'s next offset of ``topic``-``partition`` as it knows it now, or None when
    it has no valid position there (not assigned, or awaiting a reset).

    Checked against kafka-python 3.0.12: ``KafkaConsumer.position()`` first refreshes
    committed offsets and resets positions over the network, which must not happen inside a
    rebalance callback; the position it keeps locally is in its subscription state
    (``consumer._subscription.assignment[tp].position``).
    """
    state = consumer._subscription.assignment.get(KafkaTopicPartition(topic, partition))
    if state is None or not state.has_valid_position:
        return None
    offset: int = state.position.offset
    return offset


def local_lag(consumer: Any, topic: str, partition: int) -> tuple[int | None, int | None]:
    """(position, high watermark) of ``topic``-``partition`` as ``consumer`` knows them now;
    either is None when unknown (not assigned, awaiting a reset, or nothing fetched yet).

    Checked against kafka-python 3.0.12: the high watermark of the last fetch response is
    kept in the subscription state (``consumer._subscription.assignment[tp].highwater``, what
    ``KafkaConsumer.highwater()`` returns, which raises for a partition just unassigned).
    Under ``read_committed`` it is still the high watermark, not the last stable offset: an
    open transaction counts as lag until it commits.
    """
    state = consumer._subscription.assignment.get(KafkaTopicPartition(topic, partition))
    if state is None:
        return None, None
    position = state.position.offset if state.has_valid_position else None
    return position, state.highwater
