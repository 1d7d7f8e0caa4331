"""Change: what table processors pass each other (the new and old value of a key)."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["Change"]


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """What table processors pass each other: the new and the old value of a key, and
    whether the update is the key's newest version (False for an out-of-order put into a
    versioned table)."""

    new_value: Any
    old_value: Any = None
    is_latest: bool = True
