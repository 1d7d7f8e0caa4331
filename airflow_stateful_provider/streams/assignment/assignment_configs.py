"""AssignmentConfigs: the knobs of the high-availability task assignor (KIP-441).

Why a separate frozen type and not StreamsConfig: the assignor is a pure function run
by the group leader; it needs only these five values, validated once, and tests build
them directly. Names and defaults are Kafka Streams' (``acceptable.recovery.lag`` ->
``acceptable_recovery_lag``), so its documentation applies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import timedelta

from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import ConfigError

__all__ = [
    "DEFAULT_ACCEPTABLE_RECOVERY_LAG",
    "DEFAULT_MAX_WARMUP_REPLICAS",
    "DEFAULT_NUM_STANDBY_REPLICAS",
    "DEFAULT_PROBING_REBALANCE_INTERVAL_MS",
    "MAX_RACK_AWARE_ASSIGNMENT_TAG_LIST_SIZE",
    "MIN_PROBING_REBALANCE_INTERVAL_MS",
    "AssignmentConfigs",
]

DEFAULT_ACCEPTABLE_RECOVERY_LAG = 10_000
DEFAULT_MAX_WARMUP_REPLICAS = 2
DEFAULT_NUM_STANDBY_REPLICAS = 0
DEFAULT_PROBING_REBALANCE_INTERVAL_MS = 600_000
MIN_PROBING_REBALANCE_INTERVAL_MS = 60_000
#: Kafka Streams refuses more than five rack-aware tag keys; so do we.
MAX_RACK_AWARE_ASSIGNMENT_TAG_LIST_SIZE = 5


def _non_negative_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return value


def _tag_keys(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        # A lone string would otherwise be split into one tag per character.
        raise ConfigError(
            f"rack_aware_assignment_tags must be a sequence of tag keys, got the string {value!r}"
        )
    if not isinstance(value, Iterable):
        raise ConfigError(
            "rack_aware_assignment_tags must be a sequence of tag keys, "
            f"got {type(value).__name__} {value!r}"
        )
    keys = tuple(value)
    for key in keys:
        if not isinstance(key, str) or not key or key != key.strip():
            raise ConfigError(
                f"rack_aware_assignment_tags entries must be non-empty strings without "
                f"surrounding blanks, got {key!r} in {keys!r}"
            )
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ConfigError(f"rack_aware_assignment_tags repeats {duplicates!r} in {keys!r}")
    if len(keys) > MAX_RACK_AWARE_ASSIGNMENT_TAG_LIST_SIZE:
        raise ConfigError(
            f"rack_aware_assignment_tags accepts at most {MAX_RACK_AWARE_ASSIGNMENT_TAG_LIST_SIZE} "
            f"keys, got {len(keys)}: {keys!r}"
        )
    return keys


@dataclasses.dataclass(frozen=True, slots=True)
class AssignmentConfigs:
    """Validated settings of :func:`~.task_assignor.assign`.

    - ``acceptable_recovery_lag``: a client whose lag on a task is at most this many
      changelog records is "caught up" and may receive the task as active right away.
    - ``max_warmup_replicas``: how many extra (warmup) standbys one assignment may hand out
      to prepare task movements; bounds the extra restore traffic per probing round.
    - ``num_standby_replicas``: hot standbys per stateful task.
    - ``probing_rebalance_interval_ms``: delay of the follow-up rebalance that checks whether
      warmups caught up (int ms or timedelta; at least one minute, as in Kafka Streams).
    - ``rack_aware_assignment_tags``: client tag keys standbys should spread over.
    """

    acceptable_recovery_lag: int = DEFAULT_ACCEPTABLE_RECOVERY_LAG
    max_warmup_replicas: int = DEFAULT_MAX_WARMUP_REPLICAS
    num_standby_replicas: int = DEFAULT_NUM_STANDBY_REPLICAS
    probing_rebalance_interval_ms: int = DEFAULT_PROBING_REBALANCE_INTERVAL_MS
    rack_aware_assignment_tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _non_negative_int("acceptable_recovery_lag", self.acceptable_recovery_lag, 0)
        _non_negative_int("max_warmup_replicas", self.max_warmup_replicas, 1)
        _non_negative_int("num_standby_replicas", self.num_standby_replicas, 0)
        interval: int | timedelta = self.probing_rebalance_interval_ms
        object.__setattr__(
            self,
            "probing_rebalance_interval_ms",
            duration_ms(
                interval, "probing_rebalance_interval_ms", minimum=MIN_PROBING_REBALANCE_INTERVAL_MS
            ),
        )
        object.__setattr__(
            self, "rack_aware_assignment_tags", _tag_keys(self.rack_aware_assignment_tags)
        )
