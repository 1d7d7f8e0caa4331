"""Joining the consumer group through kafka-python's group coordinator (``consumer._coordinator``).

kafka-python 3.0.12 has no public way to ask whether a join is pending or to request one;
and it loses joins in two ways the stream thread meets. Everything the engine does to the
coordinator is here: :func:`group_rejoining`, :func:`request_rebalance` and
:func:`keep_completed_join_results`.

Keeping a group join that finished between two ``poll()`` calls: kafka-python 3.0.12 runs
JoinGroup + SyncGroup as a task on its IO thread. A ``poll()`` whose timeout ends first
returns and leaves the task running (by design: the next poll awaits the same task). But
when the task *completes* before the next poll, that poll sees a finished task and starts a
new JoinGroup instead of using its result (``BaseCoordinator.join_group_async``:
"``_join_task is None or _join_task.is_done``"). The broker answers the new JoinGroup with
another rebalance, so members that poll briefly (a busy stream thread polls with timeout 0)
rebalance forever, or finish a round the group has already moved past and process outside it
until the session timeout.

:func:`keep_completed_join_results` makes the consumer use a join that completed
successfully: just before the coordinator checks its join task, a finished, successful
task is replaced by a pending one that yields the same assignment, so the coordinator takes
its normal success path (state STABLE, heartbeats resumed, ``on_join_complete`` with the
assignment). Failed tasks are left alone (the coordinator retries them as before). Consumers
without this coordinator layout (other kafka-python versions) are left untouched.

It also keeps ``need_rejoin()`` true until a started join has been completed by a poll.
``poll()`` only enters the join code while ``need_rejoin()`` holds, and for a group leader
whose rejoin was caused by a metadata change (``_assignment_snapshot != _metadata_snapshot``,
with ``rejoin_needed`` false) that condition ends *inside* the join task, when the leader
performs the assignment (``_perform_assignment`` copies the metadata snapshot). If the poll
that started the join returned first (the JoinGroup waits for the other members, about a
heartbeat interval), no later poll ever completes it: the member stays REBALANCING with
heartbeats off and never applies its assignment, refuses every commit locally
(RebalanceInProgressError: "commit deferred"), and the broker evicts it after the session
timeout while it keeps processing its old tasks (bench/group_dropout.py: 2 starts in 8;
tests/integration/test_group_join.py). ``coordinator.rejoining`` is set once the join is
prepared and cleared only when the join succeeds, so "``need_rejoin()`` or ``rejoining``"
makes the next poll finish it.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from airflow_stateful_provider.streams.errors import IllegalStateError

__all__ = ["group_rejoining", "keep_completed_join_results", "request_rebalance"]

log = logging.getLogger(__name__)


def _coordinator(consumer: Any) -> Any:
    """The consumer's group coordinator, or None (a consumer without a group, or another
    layout): ``KafkaConsumer._coordinator`` in kafka-python 3.0.12."""
    return getattr(consumer, "_coordinator", None)


def group_rejoining(consumer: Any) -> bool:
    """Whether ``consumer`` must (re)join its group at its next ``poll()``: the stream thread
    then polls with REBALANCE_POLL_MS and defers commits and control actions.

    Checked against kafka-python 3.0.12: ``KafkaConsumer`` has no public form of its
    coordinator's ``need_rejoin()`` (which :func:`keep_completed_join_results` extends to a
    started join). False for a consumer without a group coordinator.
    """
    need_rejoin = getattr(_coordinator(consumer), "need_rejoin", None)
    return bool(need_rejoin()) if callable(need_rejoin) else False


def group_coordinator_unknown(consumer: Any) -> bool:
    """Whether ``consumer`` has no group coordinator now (every broker down, the coordinator's
    broker gone and not found again): its polls then fetch nothing new for the group.

    Checked against kafka-python 3.0.12: the coordinator's ``coordinator_id`` is None until a
    look-up succeeds and again once the coordinator is marked dead (read only: its
    ``coordinator_unknown()`` may mark it dead, an IO-thread action). False for a consumer
    without a group coordinator.
    """
    coordinator = _coordinator(consumer)
    return coordinator is not None and getattr(coordinator, "coordinator_id", 0) is None


def request_rebalance(consumer: Any) -> None:
    """Make ``consumer`` rejoin its group at its next ``poll()``: a probing rebalance at the
    time an AssignmentInfo asked for, or the immediate follow-up of a cooperative move.

    Checked against kafka-python 3.0.12: it has no public ``enforce_rebalance()``; its
    coordinator's ``request_rejoin()`` only sets a flag that the next ``poll()`` acts on
    (JoinGroup then SyncGroup), so calling this from the stream thread between polls is safe.
    A broker answers a *follower* that rejoins with unchanged metadata with the current
    generation and no rebalance; the StreamsPartitionAssignor changes ``unique_field`` in
    every subscription so the rejoin always starts a real rebalance. Under the cooperative
    protocol no partition is revoked by the rejoin itself.
    """
    request_rejoin = getattr(_coordinator(consumer), "request_rejoin", None)
    if request_rejoin is None:
        raise IllegalStateError(
            f"cannot request a rebalance from {type(consumer).__name__}: it has no group coordinator "
            "(expected a kafka-python 3 KafkaConsumer with a group_id)"
        )
    if getattr(consumer, "config", {}).get("group_id") is None:
        raise IllegalStateError(f"cannot request a rebalance from {type(consumer).__name__}: it has no group_id")
    request_rejoin()


def keep_completed_join_results(consumer: Any) -> bool:
    """Install the fix on ``consumer``'s group coordinator (module docstring); returns whether
    it applies. Checked against kafka-python 3.0.12 (``BaseCoordinator._join_task``,
    ``_manager.call_soon``, ``need_rejoin``, ``rejoining``); a coordinator of another layout
    is left untouched."""
    coordinator = _coordinator(consumer)
    original = getattr(coordinator, "join_group_async", None)
    if original is None or not hasattr(coordinator, "_join_task") or not hasattr(coordinator, "_manager"):
        return False
    if getattr(original, "_keeps_completed_joins", False):
        return True

    @functools.wraps(original)
    async def join_group_async(timeout_ms: Any = None) -> Any:
        task = coordinator._join_task
        if task is not None and task.is_done and task.exception is None:
            assignment = task.value
            log.debug("group %s: using the join that completed after the last poll returned",
                      getattr(coordinator, "group_id", "?"))

            async def completed() -> Any:
                return assignment

            coordinator._join_task = coordinator._manager.call_soon(completed)
        return await original(timeout_ms=timeout_ms)

    join_group_async._keeps_completed_joins = True  # type: ignore[attr-defined]  # marks the patch as applied
    coordinator.join_group_async = join_group_async

    need_rejoin = getattr(coordinator, "need_rejoin", None)
    if callable(need_rejoin) and hasattr(coordinator, "rejoining"):
        @functools.wraps(need_rejoin)
        def need_rejoin_until_joined() -> bool:
            # A join in progress must be finished by poll(), whatever started it (module docstring).
            return bool(need_rejoin()) or bool(coordinator.rejoining)

        coordinator.need_rejoin = need_rejoin_until_joined
    return True
