"""ConstrainedPrioritySet: "the least-loaded client that may take this task".

Why its own type: standby placement, task movements and stateless placement all ask this
question with a different notion of load and a different constraint. Kafka Streams keeps a
priority queue of process ids ordered by (load, process id), removes polled clients until
they are offered back, and skips clients that fail the constraint. Cluster sizes are small
(tens of clients), so we scan the members instead of keeping a heap: the answer is the same
and it stays correct when a member's load changes while it is in the set.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["ConstrainedPrioritySet"]

C = TypeVar("C", bound=Hashable)
T = TypeVar("T")


class ConstrainedPrioritySet(Generic[C, T]):
    """Clients ordered by ``weight`` (ties by client id), polled under ``constraint(client, task)``."""

    def __init__(
        self,
        constraint: Callable[[C, T], bool],
        weight: Callable[[C], float],
    ) -> None:
        self._constraint = constraint
        self._weight = weight
        self._members: set[C] = set()

    def offer(self, client: C) -> None:
        """Add ``client`` (again); offering a member twice keeps it once."""
        self._members.add(client)

    def offer_all(self, clients: Iterable[C]) -> None:
        for client in clients:
            self.offer(client)

    def poll(self, task: T, extra_constraint: Callable[[C], bool] | None = None) -> C | None:
        """Remove and return the lightest member valid for ``task``, or None when none is.

        Members that fail the constraints stay in the set.
        """
        best: C | None = None
        best_key: tuple[float, C] | None = None
        for client in self._members:
            if not self._constraint(client, task):
                continue
            if extra_constraint is not None and not extra_constraint(client):
                continue
            key = (self._weight(client), client)
            if best_key is None or key < best_key:
                best, best_key = client, key
        if best is not None:
            self._members.discard(best)
        return best

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, client: object) -> bool:
        return client in self._members
