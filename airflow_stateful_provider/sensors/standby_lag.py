"""Wait until every stateful task has enough warm standby replicas."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_stateful_provider.sensors.base import StatusConditionSensor
from airflow_stateful_provider.streams.status.application import ApplicationStatus
from airflow_stateful_provider.streams.status.conditions import (
    ConditionResult,
    checked_bound,
    standby_lag_condition,
)
from airflow_stateful_provider.triggers.status import StandbyLagTrigger

__all__ = ["StandbyLagSensor"]


class StandbyLagSensor(StatusConditionSensor):
    """Succeeds when every stateful task has at least ``min_standbys_per_task`` standbys
    that are not stale and lag at most ``max_lag_records`` changelog offsets behind the
    live end (see :func:`~airflow_stateful_provider.streams.status.conditions.standby_lag_condition`).

    Which tasks are stateful is read from the status (subtopologies with a standby or a
    restoring task); a running active reports no changelog, so name the tasks with
    ``task_ids`` when none of that is visible yet (the sensor never passes on no evidence).

    :param application_id: the application to watch (templated).
    :param max_lag_records: the largest lag, in changelog offsets, a standby may have.
    :param min_standbys_per_task: standbys (warmups not counted) each task needs (>= 1).
    :param task_ids: the stateful tasks to check (templated); None: inferred.
    Other parameters: see :class:`~airflow_stateful_provider.sensors.base.StatusConditionSensor`.
    """

    template_fields: Sequence[str] = ("application_id", "task_ids", "stateful_streams_conn_id")

    def __init__(self, *, application_id: str, max_lag_records: int, min_standbys_per_task: int = 1,
                 **kwargs: Any) -> None:
        super().__init__(application_id=application_id, **kwargs)
        self.max_lag_records = checked_bound("max_lag_records", max_lag_records, 0)
        self.min_standbys_per_task = checked_bound("min_standbys_per_task", min_standbys_per_task, 1)

    def evaluate(self, status: ApplicationStatus) -> ConditionResult:
        return standby_lag_condition(status, max_lag_records=self.max_lag_records,
                                     min_standbys_per_task=self.min_standbys_per_task,
                                     task_ids=self._selected_task_ids())

    def build_trigger(self, deadline: float) -> StandbyLagTrigger:
        return StandbyLagTrigger(max_lag_records=self.max_lag_records,
                                 min_standbys_per_task=self.min_standbys_per_task,
                                 **self._trigger_kwargs(deadline))
