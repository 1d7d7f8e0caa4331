"""How the DSL reads, writes, groups and joins: Consumed, Produced, Grouped, Joined.

Small immutable values a user passes to DSL operations (serdes, names, a partitioner);
how a table or aggregation stores its state is :mod:`.materialized`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from airflow_stateful_provider.streams.serdes import check_serde

__all__ = ["Consumed", "Grouped", "Joined", "Produced"]


@dataclasses.dataclass(frozen=True)
class Consumed:
    """How a source reads: serdes (None = config defaults) and an optional node name."""

    key_serde: Any = None
    value_serde: Any = None
    name: str | None = None

    def __post_init__(self) -> None:
        _check_serdes(self)

    @classmethod
    def with_(cls, key_serde: Any = None, value_serde: Any = None) -> Consumed:
        return cls(key_serde, value_serde)

    @classmethod
    def as_(cls, name: str) -> Consumed:
        return cls(name=name)


@dataclasses.dataclass(frozen=True)
class Produced:
    """How a sink writes: serdes, partitioner ``(topic, key, value, n) -> partition``, name."""

    key_serde: Any = None
    value_serde: Any = None
    partitioner: Callable[..., int | None] | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        _check_serdes(self)

    @classmethod
    def with_(cls, key_serde: Any = None, value_serde: Any = None) -> Produced:
        return cls(key_serde, value_serde)


@dataclasses.dataclass(frozen=True)
class Grouped:
    """Serdes for a grouping's repartition topic, and the name that topic is derived from."""

    key_serde: Any = None
    value_serde: Any = None
    name: str | None = None

    def __post_init__(self) -> None:
        _check_serdes(self)

    @classmethod
    def with_(cls, key_serde: Any = None, value_serde: Any = None) -> Grouped:
        return cls(key_serde, value_serde)

    @classmethod
    def as_(cls, name: str) -> Grouped:
        return cls(name=name)


@dataclasses.dataclass(frozen=True)
class Joined:
    """Serdes of a stream-table join (used if the stream must be repartitioned) and a name."""

    key_serde: Any = None
    value_serde: Any = None
    other_value_serde: Any = None
    name: str | None = None

    def __post_init__(self) -> None:
        _check_serdes(self)


def _check_serdes(parameters: Any) -> None:
    """Serdes given by an unknown name fail here, where the user wrote them."""
    for field in dataclasses.fields(parameters):
        if field.name.endswith("_serde"):
            check_serde(getattr(parameters, field.name), f"{type(parameters).__name__} {field.name}")
