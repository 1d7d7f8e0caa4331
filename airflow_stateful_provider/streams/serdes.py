"""Serdes: how keys and values become the bytes that stores and topics hold.

Stores work on bytes; serdes live above them, in the runtime. Each serde has a
stable ``name`` that store metadata records, so tools that open a store
directory without the topology (``open_store``) can still decode it with
:func:`get_serde`. ``None`` maps to ``None`` both ways: it is the tombstone.

Errors are :class:`SerializationError` naming the serde and the offending value.

A serde given to a node or store may be an object, a built-in name or None; None means
"the application's default" (``StreamsConfig.default_key_serde`` / ``default_value_serde``),
resolved when a task is built (:func:`resolve_serde`), so a topology can be written before
its config exists, as in Kafka Streams.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from airflow_stateful_provider.streams.errors import ConfigError, SerializationError

__all__ = [
    "BytesSerde",
    "Int64Serde",
    "JsonSerde",
    "Serde",
    "Serdes",
    "StringSerde",
    "check_serde",
    "get_serde",
    "resolve_serde",
    "serde_name",
]

_INT64 = struct.Struct(">q")
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _show(value: Any, limit: int = 80) -> str:
    """repr() of a bad value, cut so a megabyte payload does not flood the log."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@runtime_checkable
class Serde(Protocol):
    """Converts values to bytes and back; ``name`` identifies it in store metadata."""

    name: str

    def serialize(self, value: Any) -> bytes | None: ...

    def deserialize(self, data: bytes | None) -> Any: ...


class BytesSerde:
    """Identity serde: values already are bytes (bytearray/memoryview are copied to bytes)."""

    name = "bytes"
    __slots__ = ()

    def serialize(self, value: bytes | bytearray | memoryview | None) -> bytes | None:
        if value is None or type(value) is bytes:
            return value
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        raise SerializationError(
            f"serde 'bytes' can only serialize bytes, got {type(value).__name__} {_show(value)}"
        )

    def deserialize(self, data: bytes | None) -> bytes | None:
        if data is None or type(data) is bytes:
            return data
        if isinstance(data, (bytearray, memoryview)):
            return bytes(data)
        raise SerializationError(
            f"serde 'bytes' can only deserialize bytes, got {type(data).__name__} {_show(data)}"
        )

    def __repr__(self) -> str:
        return "Serdes.bytes()"


class StringSerde:
    """UTF-8 text (Kafka's StringSerde)."""

    name = "string"
    __slots__ = ()

    def serialize(self, value: str | None) -> bytes | None:
        if value is None:
            return None
        if type(value) is not str and not isinstance(value, str):
            raise SerializationError(
                f"serde 'string' can only serialize str, got {type(value).__name__} {_show(value)}"
            )
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:  # lone surrogates
            raise SerializationError(
                f"serde 'string' cannot encode {_show(value)} as UTF-8: {exc.reason} at {exc.start}"
            ) from exc

    def deserialize(self, data: bytes | None) -> str | None:
        if data is None:
            return None
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SerializationError(
                f"serde 'string' cannot decode {_show(bytes(data))} as UTF-8: "
                f"{exc.reason} at byte {exc.start}"
            ) from exc
        except TypeError as exc:
            raise SerializationError(
                f"serde 'string' can only deserialize bytes, got {type(data).__name__} {_show(data)}"
            ) from exc

    def __repr__(self) -> str:
        return "Serdes.string()"


class Int64Serde:
    """Signed 64-bit integer as 8 bytes big-endian (Kafka's LongSerde)."""

    name = "int64"
    __slots__ = ()

    def serialize(self, value: int | None) -> bytes | None:
        if value is None:
            return None
        if type(value) is not int and (isinstance(value, bool) or not isinstance(value, int)):
            raise SerializationError(
                f"serde 'int64' can only serialize int, got {type(value).__name__} {_show(value)}"
            )
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise SerializationError(f"serde 'int64': {value} does not fit in a signed 64-bit integer")
        return _INT64.pack(value)

    def deserialize(self, data: bytes | None) -> int | None:
        if data is None:
            return None
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SerializationError(
                f"serde 'int64' can only deserialize bytes, got {type(data).__name__} {_show(data)}"
            )
        if len(data) != 8:
            raise SerializationError(
                f"serde 'int64' needs exactly 8 bytes, got {len(data)}: {_show(bytes(data))}"
            )
        return _INT64.unpack(data)[0]

    def __repr__(self) -> str:
        return "Serdes.int64()"


class JsonSerde:
    """JSON documents as compact UTF-8 (no Kafka equivalent; handy for aggregates and tools)."""

    name = "json"
    __slots__ = ("_encoder", "_decoder")

    def __init__(self) -> None:
        self._encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        self._decoder = json.JSONDecoder()

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        try:
            return self._encoder.encode(value).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"serde 'json' cannot serialize {_show(value)}: {exc}") from exc

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return self._decoder.decode(bytes(data).decode("utf-8"))
        except (TypeError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise SerializationError(f"serde 'json' cannot deserialize {_show(data)}: {exc}") from exc

    def __repr__(self) -> str:
        return "Serdes.json()"


class Serdes:
    """Factory namespace mirroring Kafka's ``Serdes.String()`` etc. in snake_case."""

    @staticmethod
    def bytes() -> BytesSerde:
        return BytesSerde()

    @staticmethod
    def string() -> StringSerde:
        return StringSerde()

    @staticmethod
    def int64() -> Int64Serde:
        return Int64Serde()

    @staticmethod
    def json() -> JsonSerde:
        return JsonSerde()


_BY_NAME: dict[str, Callable[[], Serde]] = {
    "bytes": BytesSerde, "string": StringSerde, "int64": Int64Serde, "json": JsonSerde,
}


def get_serde(name: str) -> Serde:
    """The built-in serde called ``name`` (as recorded in store metadata)."""
    try:
        return _BY_NAME[name]()
    except (KeyError, TypeError):
        raise SerializationError(
            f"unknown serde name {name!r}; built-in serdes are {sorted(_BY_NAME)}"
        ) from None


def serde_name(serde: Any) -> str:
    """Name to record in store metadata for ``serde`` (a serde object or a built-in name).

    Custom serdes without a ``name`` attribute are recorded by class path, which tools
    cannot decode but can at least report.
    """
    if isinstance(serde, str):
        get_serde(serde)
        return serde
    name = getattr(serde, "name", None)
    if isinstance(name, str) and name:
        return name
    if hasattr(serde, "serialize") and hasattr(serde, "deserialize"):
        cls = type(serde)
        return f"{cls.__module__}.{cls.__qualname__}"
    raise SerializationError(f"{_show(serde)} is not a serde (needs serialize and deserialize)")


def check_serde(serde: Any, what: str, *, allow_none: bool = True) -> None:
    """Refuse what :func:`resolve_serde` would refuse at run time, when the serde is given:
    an unknown built-in name (``"avro"``) or an object without serialize/deserialize.
    ``None`` (the application's default) is allowed unless ``allow_none`` is False."""
    if serde is None and allow_none:
        return
    if isinstance(serde, str):
        if serde not in _BY_NAME:
            raise ConfigError(f"{what}: unknown serde name {serde!r}; built-in serdes are {sorted(_BY_NAME)} "
                              f"(or give a serde object with serialize/deserialize)")
        return
    if not (hasattr(serde, "serialize") and hasattr(serde, "deserialize")):
        raise ConfigError(f"{what} must be a serde (with serialize/deserialize) or one of {sorted(_BY_NAME)}, "
                          f"got {_show(serde)}")


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
