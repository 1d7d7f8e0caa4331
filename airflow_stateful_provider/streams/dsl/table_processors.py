"""The processors behind tables: materializing a table topic, and the stream-table join
(as of the record's time when the table is versioned, docs/semantics.md §5)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_stateful_provider.streams.dsl.change import Change
from airflow_stateful_provider.streams.dsl.dropped import log_dropped
from airflow_stateful_provider.streams.dsl.expiry import KeyExpiry
from airflow_stateful_provider.streams.processor import Processor, Record
from airflow_stateful_provider.streams.state.common.segments import segment_clock
from airflow_stateful_provider.streams.state.versioned.store import NOT_PUT, VALID_TO_UNDEFINED

__all__ = ["KTableSourceProcessor", "PUT_RETURN_CODE_NOT_PUT", "PUT_RETURN_CODE_VALID_TO_UNDEFINED",
           "StreamTableJoinProcessor"]

#: The put result of a versioned store when the record was older than history retention
#: (Kafka's ``VersionedKeyValueStore.PUT_RETURN_CODE_NOT_PUT``), and when the new version
#: is the newest one.
PUT_RETURN_CODE_NOT_PUT = NOT_PUT
PUT_RETURN_CODE_VALID_TO_UNDEFINED = VALID_TO_UNDEFINED


class KTableSourceProcessor(Processor):
    """Materializes a table topic. A versioned table forwards an update only when the put
    was accepted, marking whether it is the newest version (docs/semantics.md §5)."""

    def __init__(self, store_name: str, versioned: bool) -> None:
        self._store_name = store_name
        self._versioned = versioned

    def init(self, context: Any) -> None:
        super().init(context)
        self._store = context.get_state_store(self._store_name)
        self._clock = segment_clock(self._store) if self._versioned else None
        self._expiry = None if self._versioned else KeyExpiry(context, self._store, self._store_name)

    def process(self, record: Record) -> None:
        if record.key is None:
            log_dropped(self.context, "null-key", f"table {self._store_name!r} cannot hold a null key")
            return
        store = self._store
        if self._versioned:
            old = store.get(record.key)
            old_value = None if old is None else old.value
            result = store.put(record.key, record.value, record.timestamp)
            if result == PUT_RETURN_CODE_NOT_PUT:
                self._count_expired(record)
                return
            is_latest = result == PUT_RETURN_CODE_VALID_TO_UNDEFINED
            self.context.forward(record.with_value(Change(record.value, old_value, is_latest)))
        else:
            expiry = self._expiry
            if expiry is not None and expiry.active and expiry.dropped(record):
                return
            old_value = store.get(record.key)
            store.put(record.key, record.value)
            self.context.forward(record.with_value(Change(record.value, old_value, True)))

    def _count_expired(self, record: Record) -> None:
        """A version older than history retention as of a maintenance run's cut-off is dropped
        as expired and counted (docs/semantics.md §5); other NOT_PUT versions are not counted,
        as in Kafka Streams."""
        clock = self._clock
        cutoff = None if clock is None else clock.retention_cutoff
        if cutoff is None:
            return
        horizon = cutoff - self._store.history_retention_ms
        if record.timestamp < horizon:
            log_dropped(self.context, "expired",
                        f"version at {record.timestamp} of key {record.key!r} is older than history retention as "
                        f"of the retention cut-off {cutoff} of a maintenance run ({horizon})")


class StreamTableJoinProcessor(Processor):
    """KStream-KTable join: lookup by key, as of the stream record's timestamp when the
    table is versioned. Records with a null key or value are dropped (counted)."""

    def __init__(self, store_name: str, versioned: bool, joiner: Callable[[Any, Any], Any], left: bool) -> None:
        self._store_name = store_name
        self._versioned = versioned
        self._joiner = joiner
        self._left = left

    def init(self, context: Any) -> None:
        super().init(context)
        self._store = context.get_state_store(self._store_name)

    def process(self, record: Record) -> None:
        key = record.key
        if record.value is None or (key is None and not self._left):
            log_dropped(self.context, "null-key-or-value", "a join needs a key and a value")
            return
        if key is None:
            table_value = None  # left join keeps records with a null key (Kafka does the same)
        elif self._versioned:
            found = self._store.get(key, record.timestamp)
            table_value = None if found is None else found.value
        else:
            table_value = self._store.get(key)
        if table_value is None and not self._left:
            return
        self.context.forward(record.with_value(self._joiner(record.value, table_value)))
