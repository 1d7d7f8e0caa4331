"""Hand back fetched records that kafka-python parked while their partition was paused.

kafka-python 3.0.12 (KAFKA-7548 port, ``Fetcher.fetched_records``): when a partition is
paused while the consumer still holds the rest of a fetched batch of it, the rest is
*parked*; once the partition is resumed it is handed back only if the fetcher's in-line
slot (``_next_partition_records``) is None. But a batch that was used up stays in that
slot (empty, not None), and a parked partition is never fetched again either
(``_fetchable_partitions`` skips it). The partition then stalls for good: its task
processes nothing more and its committed offset stops, with nothing in the logs.

A stream thread pauses input partitions whenever a task's buffer is full or a task
restores, so it can pause a partition mid-batch at any time. :func:`release_parked_fetches`
empties a used-up in-line slot (treated exactly like None everywhere else in the fetcher)
so the next poll picks up parked records of resumed partitions. The restore consumer avoids
the problem instead by never pausing mid-batch (restoration/changelog_reader.py).
Consumers without this fetcher layout (other kafka-python versions) are left untouched.
"""

from __future__ import annotations

from typing import Any

__all__ = ["release_parked_fetches"]


def release_parked_fetches(consumer: Any) -> None:
    """Call before ``consumer.poll()``, from the thread that polls (module docstring).

    Checked against kafka-python 3.0.12: reads the fetcher's ``_paused_partition_records``
    and empties its ``_next_partition_records`` slot when it holds a used-up batch.
    """
    fetcher: Any = getattr(consumer, "_fetcher", None)
    if not getattr(fetcher, "_paused_partition_records", None):
        return  # nothing parked (or another fetcher layout)
    current = getattr(fetcher, "_next_partition_records", None)
    if current is not None and not current:
        fetcher._next_partition_records = None
