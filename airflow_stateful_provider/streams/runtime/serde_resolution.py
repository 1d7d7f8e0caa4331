"""Turning the serde given to a node or store (object, built-in name or None) into an object.

None means "the application's default" (``StreamsConfig.default_key_serde`` /
``default_value_serde``), resolved when a task is built, so a topology can be
written before its config exists, as in Kafka Streams.
"""

from __future__ import annotations

from typing import Any

from airflow_stateful_provider.streams.errors import ConfigError, SerializationError
from airflow_stateful_provider.streams.serdes import get_serde

__all__ = ["resolve_serde"]


def resolve_serde(serde: Any, default: Any, what: str) -> Any:
    """The serde object for ``serde`` (falling back to ``default``); ``what`` names the
    node or store in the error."""
    value = default if serde is None else serde
    if isinstance(value, str):
        try:
            return get_serde(value)
        except SerializationError as exc:
            raise ConfigError(f"{what}: {exc}") from None
    if value is None or not (hasattr(value, "serialize") and hasattr(value, "deserialize")):
        raise ConfigError(f"{what} must be a serde (serialize/deserialize) or a built-in name, got {value!r}")
    return value
