"""A record a DSL processor cannot use (a null key or value): logged with where it came
from, and counted in the task's dropped-records metric, as Kafka Streams does."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["log_dropped"]

log = logging.getLogger(__name__)


def log_dropped(context: Any, reason: str, detail: str) -> None:
    meta = context.record_metadata
    where = f"topic={meta.topic} partition={meta.partition} offset={meta.offset}" if meta else "no input record"
    log.warning("skipping record (%s): %s; %s", reason, detail, where)
    context.metrics.record_dropped(reason)
