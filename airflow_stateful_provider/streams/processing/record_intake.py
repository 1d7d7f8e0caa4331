"""From a consumed record to the typed record a task processes: deserialization and timestamp.

Each input partition of a task turns its raw records into :class:`Record` objects through
one ``deserialize(raw, partition_time)`` function built here: key and value through the
source's serdes (a failure goes to the deserialization exception handler), then the
timestamp through the timestamp extractor (timestamp_extractors.py). It returns None for a
record that is skipped, counted in the task's metrics by reason. The built-in extractors
keep the record's own timestamp inline: this runs once per input record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from airflow_stateful_provider.streams.errors import DeserializationError, InvalidTimestampError
from airflow_stateful_provider.streams.processing.error_handling import (
    ErrorHandlerContext,
    HandlerResult,
    normalize_response,
)
from airflow_stateful_provider.streams.processing.metrics import TaskMetrics
from airflow_stateful_provider.streams.processing.processor_node import SourceNode
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.timestamp_extractors import (
    ConsumedRecord,
    InvalidTimestampPolicy,
    TimestampExtractor,
)
from airflow_stateful_provider.streams.processor import Record, _as_headers, trusted_record

__all__ = ["record_deserializer"]

log = logging.getLogger(__name__)


def record_deserializer(source: SourceNode, task_id: Any, handler: Any,
                        timestamps: InvalidTimestampPolicy | TimestampExtractor, collector: RecordCollector,
                        metrics: TaskMetrics) -> Callable[[Any, int], Record[Any, Any] | None]:
    """``deserialize(raw, partition_time)`` for the partitions ``source`` reads (see module
    docstring); ``handler`` is the deserialization exception handler."""
    key_serde, value_serde = source.key_serde, source.value_serde
    policy = timestamps if isinstance(timestamps, InvalidTimestampPolicy) else None

    def deserialize(raw: Any, partition_time: int) -> Record[Any, Any] | None:
        try:
            key = None if raw.key is None else key_serde.deserialize(raw.key)
            value = None if raw.value is None else value_serde.deserialize(raw.value)
            headers = _as_headers(raw.headers) if raw.headers else ()
        except Exception as exc:
            context = ErrorHandlerContext(
                raw.topic, raw.partition, raw.offset, raw.timestamp,
                tuple(raw.headers or ()), source.name, task_id, raw.key, raw.value,
            )
            try:
                response = normalize_response(handler.handle(context, raw, exc), handler)
            except Exception as handler_exc:
                raise DeserializationError(
                    f"deserialization exception handler failed for record at topic "
                    f"{raw.topic!r} partition {raw.partition} offset {raw.offset}: {handler_exc!r}"
                ) from handler_exc
            for dead in response.dead_letter_records:
                collector.send_bytes(dead.topic, dead.key, dead.value, dead.timestamp, headers=dead.headers)
            if response.result is HandlerResult.FAIL:
                raise DeserializationError(
                    f"cannot deserialize record of task {task_id} at topic {raw.topic!r} "
                    f"partition {raw.partition} offset {raw.offset}: {exc!r}"
                ) from exc
            metrics.record_dropped("deserialization")
            return None
        timestamp = raw.timestamp
        if policy is None:
            timestamp = _extract_timestamp(timestamps, raw, key, value, headers, partition_time)
        if type(timestamp) is int and timestamp >= 0:
            return trusted_record(key, value, timestamp, headers)
        return _invalid_timestamp(raw, key, value, headers, timestamp, partition_time, timestamps, policy, metrics)

    return deserialize


def _extract_timestamp(extractor: Any, raw: Any, key: Any, value: Any, headers: Any, partition_time: int) -> Any:
    """A user's (or the wall-clock) extractor's timestamp for ``raw``; its failure names it."""
    record = ConsumedRecord(raw.topic, raw.partition, raw.offset, raw.timestamp, key, value, headers)
    try:
        return extractor.extract(record, partition_time)
    except Exception as exc:
        raise InvalidTimestampError(f"timestamp extractor {extractor!r} failed on the record at topic {raw.topic!r} "
                                    f"partition {raw.partition} offset {raw.offset}: {exc!r}") from exc


def _invalid_timestamp(raw: Any, key: Any, value: Any, headers: Any, timestamp: Any, partition_time: int,
                       timestamps: Any, policy: InvalidTimestampPolicy | None,
                       metrics: TaskMetrics) -> Record[Any, Any] | None:
    """A negative (or not an int) timestamp: fail, skip, or take the partition time."""
    where = f"record at topic {raw.topic!r} partition {raw.partition} offset {raw.offset}"
    if policy is InvalidTimestampPolicy.USE_PARTITION_TIME and type(timestamp) is int:
        if partition_time < 0:
            raise InvalidTimestampError(
                f"{where} has invalid timestamp {timestamp}, and partition time is not known yet to use instead "
                f"(default_timestamp_extractor 'use_partition_time_on_invalid_timestamp')")
        log.warning("%s has invalid timestamp %d; using partition time %d", where, timestamp, partition_time)
        return trusted_record(key, value, partition_time, headers)
    if policy is InvalidTimestampPolicy.FAIL or type(timestamp) is not int:
        raise InvalidTimestampError(
            f"{where} has invalid timestamp {timestamp!r}; timestamps must be >= 0 (default_timestamp_extractor "
            f"'fail_on_invalid_timestamp'; 'log_and_skip_on_invalid_timestamp' or "
            f"'use_partition_time_on_invalid_timestamp' process such records)")
    log.warning("skipping %s: negative timestamp %d (%s)", where, timestamp, timestamps)
    metrics.record_dropped("invalid-timestamp")
    return None
