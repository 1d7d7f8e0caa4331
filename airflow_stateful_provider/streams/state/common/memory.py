"""What every in-memory store shares: name and serdes, open/closed state, the no-op flush
and the context manager.

The in-memory stores mirror the RocksDB ones (same answers, same errors) without a
directory; this base keeps their bookkeeping identical to one another.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar, Self

from airflow_stateful_provider.streams.errors import InvalidStoreError
from airflow_stateful_provider.streams.serdes import serde_name

__all__ = ["InMemoryStore"]


class InMemoryStore:
    """Base of the non-persistent stores; subclasses clear their data in ``close`` and call up."""

    persistent: ClassVar[bool] = False
    # never read-only; write paths shared with the RocksDB stores test it all the same
    read_only: ClassVar[bool] = False
    # restored from the changelog after a crash, so there is nothing to commit or abort
    transactional: ClassVar[bool] = False

    def __init__(self, name: str, *, key_serde: object, value_serde: object) -> None:
        self.name = name
        self.key_serde = serde_name(key_serde)
        self.value_serde = serde_name(value_serde)
        self._open = True

    @property
    def is_open(self) -> bool:
        return self._open

    def _check_open(self) -> None:
        if not self._open:
            raise InvalidStoreError(f"store {self.name!r} is closed")

    # an in-memory store is never read-only: being open is all a write needs
    _check_writable = _check_open

    def flush(self) -> None:
        """Nothing to persist."""

    # the transactional RocksDB stores' members, so callers can treat every store alike

    def commit_transaction(self) -> int:
        """Nothing buffered: returns 0."""
        return 0

    def abort_transaction(self) -> None:
        """Nothing buffered."""

    @property
    def uncommitted_bytes(self) -> int:
        return 0

    def restoring(self) -> AbstractContextManager[Any]:
        """A null context: restoration writes into the store as usual."""
        return nullcontext()

    def close(self) -> None:
        self._open = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
