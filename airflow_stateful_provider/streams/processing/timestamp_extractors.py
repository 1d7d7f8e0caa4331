"""The timestamp each input record is processed at, and what happens when it is invalid.

As Kafka Streams' ``default.timestamp.extractor`` (``StreamsConfig.default_timestamp_extractor``,
or per source ``Topology.add_source(timestamp_extractor=...)`` / ``Consumed.with_timestamp_extractor``):

- ``"fail_on_invalid_timestamp"`` (default, FailOnInvalidTimestamp): the record's own
  timestamp; a negative one (-1 "no timestamp", or any other) fails the stream thread with
  an error naming topic, partition, offset and timestamp;
- ``"log_and_skip_on_invalid_timestamp"``: a record with a negative timestamp is logged,
  skipped and counted (``dropped-records``, reason "invalid-timestamp");
- ``"use_partition_time_on_invalid_timestamp"``: a negative timestamp is replaced by the
  partition's time (the largest timestamp processed from that partition, restored from the
  commit after a restart); with no partition time yet the thread fails;
- ``"wallclock"``: the wall-clock time the record is processed at;
- an object with ``extract(record, partition_time) -> int``: ``record`` is a
  :class:`ConsumedRecord` (deserialized key and value); a negative result skips the record
  (logged and counted, as in Kafka Streams).
"""

from __future__ import annotations

import dataclasses
import enum
import time
from typing import Any, Protocol

from airflow_stateful_provider.streams.config import TIMESTAMP_EXTRACTOR_NAMES
from airflow_stateful_provider.streams.errors import ConfigError

__all__ = ["ConsumedRecord", "InvalidTimestampPolicy", "TimestampExtractor", "extractor_from_config"]


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """An input record as a timestamp extractor sees it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...]


class TimestampExtractor(Protocol):
    def extract(self, record: ConsumedRecord, partition_time: int) -> int: ...


class InvalidTimestampPolicy(enum.Enum):
    """The built-in extractors: the record's timestamp when valid, and this when not."""

    FAIL = "fail_on_invalid_timestamp"
    SKIP = "log_and_skip_on_invalid_timestamp"
    USE_PARTITION_TIME = "use_partition_time_on_invalid_timestamp"


class WallclockTimestampExtractor:
    """Processing time instead of event time (Kafka Streams' WallclockTimestampExtractor)."""

    def extract(self, record: ConsumedRecord, partition_time: int) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "WallclockTimestampExtractor()"


def extractor_from_config(value: Any, what: str) -> InvalidTimestampPolicy | TimestampExtractor:
    """A built-in policy (the hot path keeps the record's own timestamp inline) or an
    extractor object; ``what`` names the setting in the error."""
    if value == "wallclock":
        return WallclockTimestampExtractor()
    if isinstance(value, InvalidTimestampPolicy):
        return value
    if isinstance(value, str):
        try:
            return InvalidTimestampPolicy(value)
        except ValueError:
            raise ConfigError(f"{what} must be one of {list(TIMESTAMP_EXTRACTOR_NAMES)} or an object with "
                              f"extract(record, partition_time), got {value!r}") from None
    if callable(getattr(value, "extract", None)):  # a user's extractor: any object with extract()
        extractor: TimestampExtractor = value
        return extractor
    raise ConfigError(f"{what} must be one of {list(TIMESTAMP_EXTRACTOR_NAMES)} or an object with "
                      f"extract(record, partition_time), got {value!r}")
