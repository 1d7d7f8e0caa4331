"""The processors of the DSL's stateless operations: filter, map, select_key, peek, to_stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_stateful_provider.streams.dsl.change import Change
from airflow_stateful_provider.streams.processor import Processor, Record, trusted_record

__all__ = [
    "FilterProcessor",
    "MapProcessor",
    "MapValuesProcessor",
    "PeekProcessor",
    "SelectKeyProcessor",
    "ToStreamProcessor",
]


class FilterProcessor(Processor):
    __slots__ = ("_predicate", "_negate")

    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool) -> None:
        self._predicate = predicate
        self._negate = negate

    def process(self, record: Record) -> None:
        if bool(self._predicate(record.key, record.value)) != self._negate:
            self.context.forward(record)


class MapValuesProcessor(Processor):
    def __init__(self, mapper: Callable[[Any], Any]) -> None:
        self._mapper = mapper

    def process(self, record: Record) -> None:
        self.context.forward(record.with_value(self._mapper(record.value)))


class MapProcessor(Processor):
    def __init__(self, mapper: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        self._mapper = mapper

    def process(self, record: Record) -> None:
        result = self._mapper(record.key, record.value)
        try:
            key, value = result
        except (TypeError, ValueError):
            raise TypeError(f"map() mapper must return a (key, value) pair, got {result!r}") from None
        self.context.forward(trusted_record(key, value, record.timestamp, record.headers))


class SelectKeyProcessor(Processor):
    def __init__(self, mapper: Callable[[Any, Any], Any]) -> None:
        self._mapper = mapper

    def process(self, record: Record) -> None:
        self.context.forward(record.with_key(self._mapper(record.key, record.value)))


class PeekProcessor(Processor):
    def __init__(self, action: Callable[[Any, Any], None], forward: bool) -> None:
        self._action = action
        self._forward = forward

    def process(self, record: Record) -> None:
        self._action(record.key, record.value)
        if self._forward:
            self.context.forward(record)


class ToStreamProcessor(Processor):
    def process(self, record: Record) -> None:
        change = record.value
        self.context.forward(record.with_value(change.new_value if isinstance(change, Change) else change))
