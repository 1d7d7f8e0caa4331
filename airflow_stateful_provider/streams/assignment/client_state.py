"""What the task assignor knows about one client (one ``KafkaStreams`` instance), and its working copy.

Why two types: :class:`ClientState` is the validated, immutable input the group leader
builds from a member's subscription (capacity = its stream thread count, previous tasks,
lags, tags); :class:`AssignedClient` is the assignor's private scratch pad that accumulates
the new active and standby tasks while the algorithm runs, and answers the load questions
(tasks per thread) every step asks.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from airflow_stateful_provider.streams.assignment.lag import LATEST_OFFSET, NO_STATE_LAG
from airflow_stateful_provider.streams.errors import StreamsError
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = ["AssignedClient", "ClientState", "InvalidAssignmentInputError", "ProcessId"]

#: A client's process id: the uuid (or its string form) a ``KafkaStreams`` instance puts in its
#: subscription. All process ids of one assignment must be of one type, so they can be sorted.
ProcessId = str | uuid.UUID


class InvalidAssignmentInputError(StreamsError, ValueError):
    """The task assignor was given inconsistent input (bad capacity or lag, duplicate process
    id, a task both stateful and stateless, no clients); the message names the value."""


def _task_set(name: str, process_id: object, tasks: Iterable[Any]) -> frozenset[TaskId]:
    if isinstance(tasks, (str, bytes)):
        raise InvalidAssignmentInputError(
            f"client {process_id}: {name} must be a collection of task ids, got {tasks!r}"
        )
    try:
        result = frozenset(tasks)
    except TypeError as exc:
        raise InvalidAssignmentInputError(
            f"client {process_id}: {name} must be a collection of task ids, got {tasks!r}"
        ) from exc
    for task in result:
        if isinstance(task, (str, bytes)):
            raise InvalidAssignmentInputError(
                f"client {process_id}: {name} must hold task ids, got {task!r}"
            )
    return result


@dataclasses.dataclass(frozen=True, slots=True)
class ClientState:
    """One client as seen by the leader.

    - ``capacity``: number of stream threads (load is measured in tasks per thread).
    - ``previous_active_tasks`` / ``previous_standby_tasks``: what it owned before; the
      high-availability algorithm itself decides from lags (a running active reports -2),
      these are kept for callers (cooperative revocation, logs) and the sticky fallback.
    - ``task_lags``: task -> lag as computed by :func:`~.lag.compute_task_lags`
      (-2 = running active, >= 0 = records behind); a task without an entry means
      "no state" (:data:`~.lag.NO_STATE_LAG`).
    - ``client_tags``: ``client_tag.<key>=<value>`` of the instance, for rack-aware standbys.
    """

    process_id: ProcessId
    capacity: int = 1
    previous_active_tasks: frozenset[TaskId] = frozenset()
    previous_standby_tasks: frozenset[TaskId] = frozenset()
    task_lags: Mapping[TaskId, int] = dataclasses.field(default_factory=dict, hash=False)
    client_tags: Mapping[str, str] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        pid = self.process_id
        if not isinstance(pid, (str, uuid.UUID)) or (isinstance(pid, str) and not pid):
            raise InvalidAssignmentInputError(
                f"process_id must be a non-empty str or a uuid.UUID, got {pid!r}"
            )
        cap = self.capacity
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise InvalidAssignmentInputError(
                f"client {pid}: capacity (stream thread count) must be an int >= 1, got {cap!r}"
            )
        set_ = object.__setattr__
        set_(self, "previous_active_tasks",
             _task_set("previous_active_tasks", pid, self.previous_active_tasks))
        set_(self, "previous_standby_tasks",
             _task_set("previous_standby_tasks", pid, self.previous_standby_tasks))
        lags = dict(self.task_lags)
        for task, lag in lags.items():
            if isinstance(lag, bool) or not isinstance(lag, int) or (lag < 0 and lag != LATEST_OFFSET):
                raise InvalidAssignmentInputError(
                    f"client {pid}: lag of task {task} must be an int >= 0 or "
                    f"{LATEST_OFFSET} (running active), got {lag!r}"
                )
        set_(self, "task_lags", MappingProxyType(lags))
        tags = dict(self.client_tags)
        for key, value in tags.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidAssignmentInputError(
                    f"client {pid}: client tags must map str to str, got {key!r}: {value!r}"
                )
        set_(self, "client_tags", MappingProxyType(tags))

    def lag_for(self, task: TaskId) -> int:
        """The client's lag on ``task``; :data:`~.lag.NO_STATE_LAG` when it has no state for it."""
        return self.task_lags.get(task, NO_STATE_LAG)


class AssignedClient:
    """A client while the assignor runs: its input plus the active and standby tasks given so far.

    Mirrors the assignment half of Kafka Streams' ``ClientState``; assigning a task the client
    already holds (in either role) is a bug in the algorithm and raises.
    """

    __slots__ = ("state", "active_tasks", "standby_tasks")

    def __init__(self, state: ClientState) -> None:
        self.state = state
        self.active_tasks: set[TaskId] = set()
        self.standby_tasks: set[TaskId] = set()

    @property
    def process_id(self) -> ProcessId:
        return self.state.process_id

    @property
    def capacity(self) -> int:
        return self.state.capacity

    @property
    def client_tags(self) -> Mapping[str, str]:
        return self.state.client_tags

    def lag_for(self, task: TaskId) -> int:
        return self.state.lag_for(task)

    def assigned_task_count(self) -> int:
        return len(self.active_tasks) + len(self.standby_tasks)

    def assigned_task_load(self) -> float:
        """Active plus standby tasks per thread: what balancing and standby placement minimise."""
        return self.assigned_task_count() / self.capacity

    def active_task_load(self) -> float:
        """Active tasks per thread: what stateless task placement minimises."""
        return len(self.active_tasks) / self.capacity

    def has_assigned_task(self, task: TaskId) -> bool:
        return task in self.active_tasks or task in self.standby_tasks

    def has_standby_task(self, task: TaskId) -> bool:
        return task in self.standby_tasks

    def assign_active(self, task: TaskId) -> None:
        self._assert_not_assigned(task)
        self.active_tasks.add(task)

    def unassign_active(self, task: TaskId) -> None:
        if task not in self.active_tasks:
            raise AssertionError(f"client {self.process_id} does not hold active task {task}")
        self.active_tasks.remove(task)

    def assign_standby(self, task: TaskId) -> None:
        self._assert_not_assigned(task)
        self.standby_tasks.add(task)

    def unassign_standby(self, task: TaskId) -> None:
        if task not in self.standby_tasks:
            raise AssertionError(f"client {self.process_id} does not hold standby task {task}")
        self.standby_tasks.remove(task)

    def _assert_not_assigned(self, task: TaskId) -> None:
        if self.has_assigned_task(task):
            raise AssertionError(f"client {self.process_id} already holds task {task}")

    def __repr__(self) -> str:
        return (
            f"AssignedClient({self.process_id!s}, capacity={self.capacity}, "
            f"active={sorted(self.active_tasks)}, standby={sorted(self.standby_tasks)})"
        )
