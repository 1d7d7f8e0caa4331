"""The C loop of changelog_batch.py (_native_changelog_batch.c)."""

from typing import Any

def fill(records: list[Any] | tuple[Any, ...], put: Any, delete: Any, record_type: type, key_index: int,
         value_index: int) -> tuple[int, int]: ...
