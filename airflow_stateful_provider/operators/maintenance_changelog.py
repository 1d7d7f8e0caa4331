"""Offline retention's cut-off markers: what a running instance writes itself (docs/maintenance.md,
"The cut-off"), written by the operator for the stores it maintained on a stopped instance's
disk, so that restores of those stores (another replica, a wiped disk, a snapshot and its
tail) reach the same cut-off.

The marker goes to the store's changelog partition (``<application_id>-<store>-changelog``,
the task's partition) outside any transaction: exactly-once readers see it too. Writing the
same cut-off twice (the active's and a standby's copy of a task) is harmless.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from airflow_stateful_provider.streams.errors import StreamsError
from airflow_stateful_provider.streams.state.common.cutoff import (
    SESSION_CUTOFF_KEY,
    VERSIONED_CUTOFF_KEY,
    encode_cutoff,
)

__all__ = ["write_offline_cutoffs"]

_MARKER_KEYS = {"session": SESSION_CUTOFF_KEY, "versioned": VERSIONED_CUTOFF_KEY}


def write_offline_cutoffs(hook: Any, rows: Iterable[dict[str, Any]], *, timeout_s: float = 30.0) -> None:
    """For every row whose retention succeeded, send its cut-off marker and note it in the row's
    result (``changelog_records_written``; ``changelog`` says why not when the topic is
    missing). Raises StreamsError when the brokers do not acknowledge the markers."""
    from kafka.errors import KafkaError

    producer = hook.get_producer(acks="all", max_block_ms=10_000)
    try:
        futures = []
        for row in rows:
            result = row.get("result")
            key = _MARKER_KEYS.get(str(row.get("store_type")))
            if not isinstance(result, dict) or result.get("cutoff_ms") is None or key is None:
                continue
            topic = f"{row['application_id']}-{row['store']}-changelog"
            try:
                partitions = producer.partitions_for(topic) or set()
            except KafkaError:
                partitions = set()
            partition = int(str(row["task_id"]).rsplit("_", 1)[1])
            if partition not in partitions:
                result["changelog_records_written"] = 0
                result["changelog"] = f"no partition {partition} of {topic} (logging disabled?): marker not written"
                continue
            futures.append((result, producer.send(topic, key=key, value=encode_cutoff(result["cutoff_ms"]),
                                                  partition=partition, timestamp_ms=int(time.time() * 1000))))
        producer.flush(timeout=timeout_s)
        for result, future in futures:
            try:
                future.get(timeout=timeout_s)
            except KafkaError as exc:
                raise StreamsError(f"writing a retention cut-off marker failed: {exc}") from exc
            result["changelog_records_written"] = 1
    finally:
        producer.close()
