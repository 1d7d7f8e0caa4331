"""AssignmentConfigs: Kafka Streams' defaults and precise errors for bad values."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_stateful_provider.streams.assignment.assignment_configs import AssignmentConfigs
from airflow_stateful_provider.streams.errors import ConfigError


def test_defaults_are_kafka_streams_defaults() -> None:
    configs = AssignmentConfigs()
    assert configs.acceptable_recovery_lag == 10_000
    assert configs.max_warmup_replicas == 2
    assert configs.num_standby_replicas == 0
    assert configs.probing_rebalance_interval_ms == 600_000
    assert configs.rack_aware_assignment_tags == ()


def test_interval_accepts_timedelta_and_tags_any_sequence() -> None:
    configs = AssignmentConfigs(
        probing_rebalance_interval_ms=timedelta(minutes=2),  # type: ignore[arg-type]
        rack_aware_assignment_tags=["zone", "cluster"],  # type: ignore[arg-type]
    )
    assert configs.probing_rebalance_interval_ms == 120_000
    assert configs.rack_aware_assignment_tags == ("zone", "cluster")


def test_configs_are_frozen_and_hashable() -> None:
    configs = AssignmentConfigs(num_standby_replicas=1)
    with pytest.raises(AttributeError):
        configs.num_standby_replicas = 2  # type: ignore[misc]
    assert configs == AssignmentConfigs(num_standby_replicas=1)
    assert hash(configs) == hash(AssignmentConfigs(num_standby_replicas=1))


def test_boundary_values_are_accepted() -> None:
    configs = AssignmentConfigs(
        acceptable_recovery_lag=0, max_warmup_replicas=1, num_standby_replicas=0,
        probing_rebalance_interval_ms=60_000,
        rack_aware_assignment_tags=("a", "b", "c", "d", "e"),
    )
    assert configs.probing_rebalance_interval_ms == 60_000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"acceptable_recovery_lag": -1}, "acceptable_recovery_lag must be >= 0, got -1"),
        ({"acceptable_recovery_lag": 1.5}, "acceptable_recovery_lag must be an int >= 0, got float 1.5"),
        ({"max_warmup_replicas": 0}, "max_warmup_replicas must be >= 1, got 0"),
        ({"max_warmup_replicas": True}, "max_warmup_replicas must be an int >= 1, got bool True"),
        ({"num_standby_replicas": -1}, "num_standby_replicas must be >= 0, got -1"),
        ({"num_standby_replicas": "1"}, "num_standby_replicas must be an int >= 0, got str '1'"),
        ({"probing_rebalance_interval_ms": 59_999},
         "probing_rebalance_interval_ms must be >= 60000 ms, got 59999 ms"),
        ({"probing_rebalance_interval_ms": timedelta(seconds=30)},
         "probing_rebalance_interval_ms must be >= 60000 ms, got 30000 ms"),
        ({"probing_rebalance_interval_ms": "10m"},
         "probing_rebalance_interval_ms must be int milliseconds or a timedelta, got str '10m'"),
        ({"rack_aware_assignment_tags": "zone"},
         "rack_aware_assignment_tags must be a sequence of tag keys, got the string 'zone'"),
        ({"rack_aware_assignment_tags": ("zone", "")},
         "rack_aware_assignment_tags entries must be non-empty strings without surrounding "
         "blanks, got '' in ('zone', '')"),
        ({"rack_aware_assignment_tags": ("zone", 1)},
         "rack_aware_assignment_tags entries must be non-empty strings without surrounding "
         "blanks, got 1 in ('zone', 1)"),
        ({"rack_aware_assignment_tags": ("zone", "zone")},
         "rack_aware_assignment_tags repeats ['zone'] in ('zone', 'zone')"),
        ({"rack_aware_assignment_tags": ("a", "b", "c", "d", "e", "f")},
         "rack_aware_assignment_tags accepts at most 5 keys, got 6: ('a', 'b', 'c', 'd', 'e', 'f')"),
        ({"rack_aware_assignment_tags": 5},
         "rack_aware_assignment_tags must be a sequence of tag keys, got int 5"),
    ],
)
def test_bad_values_raise_config_error_naming_them(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        AssignmentConfigs(**kwargs)
    assert str(excinfo.value) == message
