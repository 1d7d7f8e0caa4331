"""Wait until a stateful application's tasks have restored their state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_stateful_provider.sensors.base import StatusConditionSensor
from airflow_stateful_provider.streams.status.application import ApplicationStatus
from airflow_stateful_provider.streams.status.conditions import (
    ConditionResult,
    checked_bound,
    restoration_condition,
)
from airflow_stateful_provider.triggers.status import RestorationTrigger

__all__ = ["RestorationSensor"]


class RestorationSensor(StatusConditionSensor):
    """Succeeds when every selected task has a trusted active owner that is running, or
    restoring with at most ``max_remaining_records`` changelog offsets left (see
    :func:`~airflow_stateful_provider.streams.status.conditions.restoration_condition`).

    Each poke logs restored/total, rate and ETA per task; on timeout the failure message
    holds the table of the tasks still restoring, unassigned or owned by a stale instance.

    :param application_id: the application to watch (templated).
    :param task_ids: only these tasks (templated; list or comma-separated); None: all reported.
    :param max_remaining_records: changelog offsets a restoring task may still have left
        and count as restored (0: fully restored).
    Other parameters: see :class:`~airflow_stateful_provider.sensors.base.StatusConditionSensor`
    and ``BaseSensorOperator`` (``timeout``, ``mode``, ``soft_fail``, ...).
    """

    template_fields: Sequence[str] = ("application_id", "task_ids", "stateful_streams_conn_id")

    def __init__(self, *, application_id: str, max_remaining_records: int = 0, **kwargs: Any) -> None:
        super().__init__(application_id=application_id, **kwargs)
        self.max_remaining_records = checked_bound("max_remaining_records", max_remaining_records, 0)

    def evaluate(self, status: ApplicationStatus) -> ConditionResult:
        return restoration_condition(status, task_ids=self._selected_task_ids(),
                                     max_remaining_records=self.max_remaining_records)

    def build_trigger(self, deadline: float) -> RestorationTrigger:
        return RestorationTrigger(max_remaining_records=self.max_remaining_records,
                                  **self._trigger_kwargs(deadline))
