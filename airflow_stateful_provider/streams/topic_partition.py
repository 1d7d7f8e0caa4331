"""TopicPartition: one partition of one topic, as the engine names it.

Checkpoint files, changelog readers, record collectors and partition groups key their
bookkeeping by it. A plain named tuple, so it compares and hashes equal to kafka-python's
``TopicPartition`` and the two mix freely in dicts and sets; where a value goes into a
kafka-python call that checks the type (``pause``, ``seek``, ``assign``), the caller converts
it there.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TopicPartition"]


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
