"""Placeholder; replaced once the state stores land."""

from __future__ import annotations

from typing import Any

from airflow_stateful_provider.streams.errors import StreamsError


class TaskStateManager:
    def __init__(self, task_id: Any, topology: Any, config: Any, *, record_collector: Any, store_type: str | None = None) -> None:
        self.task_id = task_id
        self._stores: dict[str, Any] = {}

    def initialize(self) -> None:
        pass

    def get(self, name: str) -> Any:
        try:
            return self._stores[name]
        except KeyError:
            raise StreamsError(f"no store {name!r}") from None

    def kind(self, name: str) -> str:
        raise StreamsError(f"no store {name!r}")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
