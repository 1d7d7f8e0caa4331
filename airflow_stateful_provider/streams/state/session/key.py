"""SessionKey: a key and its session window, and its byte form in stores and changelogs.

The session store, its changelogging wrapper, the write-back cache and the typed view all
speak in SessionKeys; this module is the one they share. Byte layout (docs/semantics.md §4)::

    record key bytes | end (8 bytes big-endian) | start (8 bytes big-endian)
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from airflow_stateful_provider.streams.errors import InvalidRecordError

__all__ = ["SessionKey", "as_session_key", "session_key_from_bytes", "session_key_to_bytes"]

MAX_TIMESTAMP = (1 << 63) - 1
_TS2 = struct.Struct(">qq")  # end, start


class SessionKey(NamedTuple):
    """A key and its session window ``[start, end]`` (inclusive); Kafka's ``Windowed<Bytes>``.

    A NamedTuple because stores create one per returned session: it is the cheapest
    object with named fields. Objects shaped like ``windows.Windowed`` (``.key`` and
    ``.window.start/.end``) are accepted wherever a SessionKey is.
    """

    key: bytes
    start: int
    end: int


def as_session_key(windowed: Any) -> SessionKey:
    """Validate a session key given as SessionKey, (key, start, end) or Windowed-like."""
    session: SessionKey
    if type(windowed) is SessionKey:
        session = windowed
        key, start, end = session
    else:
        window = getattr(windowed, "window", None)
        if window is not None:
            key, start, end = windowed.key, window.start, window.end
        elif isinstance(windowed, tuple) and len(windowed) == 3:
            key, start, end = windowed
        else:
            raise InvalidRecordError(f"expected a SessionKey or Windowed session key, got {windowed!r:.100}")
        session = SessionKey(key, start, end)
    if type(key) is not bytes:
        if key is None:
            raise InvalidRecordError("session key cannot be null (None)")
        raise InvalidRecordError(f"session store keys must be bytes, got {type(key).__name__} {key!r:.80}")
    if type(start) is not int or type(end) is not int or start < 0 or end < start or end > MAX_TIMESTAMP:
        raise InvalidRecordError(
            f"session window needs 0 <= start <= end < 2**63 (ints), got [{start!r}, {end!r}]"
        )
    return session


def session_key_to_bytes(windowed: SessionKey) -> bytes:
    """The store/changelog key of a session: key + end + start, both 8 bytes big-endian."""
    key, start, end = as_session_key(windowed)
    return key + _TS2.pack(end, start)


def session_key_from_bytes(data: bytes) -> SessionKey:
    """Inverse of :func:`session_key_to_bytes`."""
    if len(data) < 16:
        raise InvalidRecordError(f"session store key must be at least 16 bytes, got {len(data)}: {data!r:.80}")
    end, start = _TS2.unpack_from(data, len(data) - 16)
    return SessionKey(data[:-16], start, end)
