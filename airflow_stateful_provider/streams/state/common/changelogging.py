"""Changelogging: every write to a logged store also goes to its changelog topic.

Each kind has its wrapper (``<kind>/changelogging.py``): it forwards each write to the
inner store and hands ``(key bytes, value bytes or None, timestamp)`` to a
:class:`ChangelogWriter` (the runtime's producer to ``<application_id>-<store>-changelog``).
Restoring is the inverse: ``restore_batch(records)`` on the store replays changelog records,
in one RocksDB write batch for persistent stores. This module is what the wrappers share.

Kafka Streams logs a write even when the store drops it (an expired session
segment, a versioned put older than history retention): restoring then skips it
again, so the changelog reproduces the store exactly.
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.state.common.changelog_records import ChangelogWriter

__all__ = ["ChangeloggingStore"]


class ChangeloggingStore:
    """Reads, lifecycle and maintenance pass straight to the inner store; subclasses log
    the writes of their kind."""

    #: Read methods bound directly on the wrapper (no ``__getattr__`` detour on hot paths).
    reads: ClassVar[tuple[str, ...]] = ()

    def __init__(self, inner: Any, writer: ChangelogWriter) -> None:
        if not callable(getattr(writer, "send", None)):
            raise ConfigError(f"changelog writer must have send(key, value, timestamp), got {writer!r}")
        self.inner = inner
        self.writer = writer
        for name in self.reads:
            method = getattr(inner, name, None)
            if method is not None:
                setattr(self, name, method)

    def __getattr__(self, name: str) -> Any:
        # flush, close, stats, compact, enforce_retention, restore_batch, ...: the changelog
        # is not involved
        return getattr(self.inner, name)

    @property
    def name(self) -> str:
        name: str = self.inner.name
        return name

    @property
    def persistent(self) -> bool:
        persistent: bool = self.inner.persistent
        return persistent

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"
