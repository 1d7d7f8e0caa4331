"""A consumer's position in a partition, read from its local state.

A task asks where the main consumer stands in a partition whose buffered records it has all
processed (processing/task.py), possibly inside a rebalance callback, which runs on the
consumer's IO thread while the stream thread waits in ``poll()``.
"""

from __future__ import annotations

from typing import Any

from kafka import TopicPartition as KafkaTopicPartition

__all__ = ["local_position"]


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
