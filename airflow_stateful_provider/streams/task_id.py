"""TaskId: which partition of which subtopology a task is.

Every layer names tasks: the topology makes them, the assignor moves them, the runtime runs
them, the status document reports them. The name lives here, below all of them.
"""

from __future__ import annotations

import dataclasses
from functools import total_ordering

__all__ = ["TaskId"]


@total_ordering
@dataclasses.dataclass(frozen=True, slots=True)
class TaskId:
    """A task: partition ``partition`` of subtopology ``subtopology``. String form ``"0_1"``."""

    subtopology: int
    partition: int

    def __post_init__(self) -> None:
        for field in ("subtopology", "partition"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TaskId {field} must be an int >= 0, got {value!r}")

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, TaskId):
            return NotImplemented
        return (self.subtopology, self.partition) < (other.subtopology, other.partition)

    @classmethod
    def parse(cls, text: str) -> TaskId:
        """Inverse of ``str()``: ``"0_1"`` -> ``TaskId(0, 1)``."""
        head, sep, tail = str(text).partition("_")
        if not sep or not head.isdigit() or not tail.isdigit():
            raise ValueError(f"task id must look like '<subtopology>_<partition>', got {text!r}")
        return cls(int(head), int(tail))
