"""What the key-value processors (tables, aggregations) do with a store's time to live
(state/keyvalue/ttl.py): drop records already expired, forward a delete for expired keys."""

from __future__ import annotations

from typing import Any

from airflow_stateful_provider.streams.dsl.change import Change
from airflow_stateful_provider.streams.dsl.dropped import log_dropped
from airflow_stateful_provider.streams.processor import Record, trusted_record

__all__ = ["KeyExpiry"]


class KeyExpiry:
    """Binds a processor to its key-value store's time to live. ``active`` is False when the
    store has none (then nothing here costs anything)."""

    def __init__(self, context: Any, store: Any, store_name: str) -> None:
        self._context = context
        self._store = store
        self._store_name = store_name
        self._node = getattr(context, "current_node", None)
        register = getattr(store, "set_expiry_listener", None)
        self.active = bool(register(self._forward_delete)) if register is not None else False

    def dropped(self, record: Record) -> bool:
        """The record moves the store's stream time (expired keys are deleted, their deletes
        forwarded, before it reads them); whether it is expired itself (its timestamp + TTL <=
        the store's stream time): then it is dropped and counted as ``expired``."""
        store = self._store
        store.observe(record.timestamp)
        if not store.expired(record.timestamp):
            return False
        log_dropped(self._context, "expired",
                    f"record at {record.timestamp} for key {record.key!r} is older than the time to live of store "
                    f"{self._store_name!r} at stream time {self._store.observed_stream_time}")
        return True

    def _forward_delete(self, key: Any, old: Any, expired_at: int) -> None:
        """An expired key: a delete downstream, as Kafka Streams sends for a deleted key
        (forwarded as this processor, also from a maintenance run outside ``process``)."""
        context = self._context
        previous = getattr(context, "current_node", None)
        context.current_node = self._node
        try:
            context.forward(trusted_record(key, Change(None, old), expired_at, ()))
        finally:
            context.current_node = previous
