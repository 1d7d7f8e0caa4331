"""Triggers that poll an application's status topic until a sensor's condition holds.

The deferrable :class:`~airflow_stateful_provider.sensors.restoration.RestorationSensor`
and :class:`~airflow_stateful_provider.sensors.standby_lag.StandbyLagSensor` hand their
wait to these. Each poll reads the status through the hook without blocking the
triggerer's event loop (the connection is looked up asynchronously, the Kafka read runs
in a worker thread) and evaluates the same pure condition as the sensor's ``poke``.

The trigger enforces the sensor's deadline itself (``deadline``, epoch seconds), so a
timeout is reported as an event carrying the table of the tasks still not done; Airflow's
own deferral timeout, set a little later by the sensor, is only a backstop.

Durations are seconds (``stale_after``, ``poll_interval``, ``read_timeout``), as everywhere in
Airflow; a trigger serialized by an earlier release (with ``stale_after_ms`` and
``read_timeout_ms``, milliseconds as their names say) is still accepted.

Events (exactly one per run): ``{"status": "success" | "timeout" | "error", "message": str,
"table": str, "status_json": dict | None}``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.streams.status.application import ApplicationStatus
from airflow_stateful_provider.streams.status.conditions import (
    TRANSIENT_STATUS_ERRORS,
    ConditionResult,
    checked_bound,
    normalize_task_ids,
    restoration_condition,
    standby_lag_condition,
)
from airflow_stateful_provider.streams.status.document import DEFAULT_STALE_AFTER_MS

__all__ = ["RestorationTrigger", "StandbyLagTrigger"]


def _positive_number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
    return float(value)


def _deadline_text(deadline: float | None) -> str:
    if deadline is None:
        return "(none)"
    return datetime.fromtimestamp(deadline, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class _StatusConditionTrigger(BaseTrigger):
    """Poll the status every ``poll_interval`` seconds until the condition holds, an error
    makes waiting pointless, or ``deadline`` (epoch seconds; None: no deadline) passes.

    Transient failures (application not started yet, brokers unreachable, read timed out)
    are retried until the deadline and named in the timeout message; anything else
    (malformed documents, a bad connection) ends the wait with an error event.
    """

    #: What the event messages call the condition.
    condition_name = "condition"

    def __init__(
        self,
        *,
        application_id: str,
        stateful_streams_conn_id: str = StatefulStreamsHook.default_conn_name,
        task_ids: list[str] | None = None,
        stale_after: float = DEFAULT_STALE_AFTER_MS / 1000,
        poll_interval: float = 30.0,
        deadline: float | None = None,
        read_timeout: float = 10.0,
        stale_after_ms: int | None = None,
        read_timeout_ms: int | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(application_id, str) or not application_id:
            raise ValueError(f"application_id must be a non-empty string, got {application_id!r}")
        self.application_id = application_id
        self.stateful_streams_conn_id = stateful_streams_conn_id
        normalized = normalize_task_ids(task_ids)
        self.task_ids = None if normalized is None else list(normalized)
        # stale_after_ms / read_timeout_ms: the keys of a trigger serialized by an earlier release.
        for name, value in (("stale_after_ms", stale_after_ms), ("read_timeout_ms", read_timeout_ms)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"{name} must be an int of milliseconds > 0, got {value!r}")
        self.stale_after = stale_after_ms / 1000 if stale_after_ms is not None \
            else _positive_number(stale_after, "stale_after")
        self.read_timeout = read_timeout_ms / 1000 if read_timeout_ms is not None \
            else _positive_number(read_timeout, "read_timeout")
        self.poll_interval = _positive_number(poll_interval, "poll_interval")
        self.deadline = None if deadline is None else _positive_number(deadline, "deadline")

    # ------------------------------------------------------------------ subclass API

    def _condition_kwargs(self) -> dict[str, Any]:
        raise NotImplementedError

    def evaluate(self, status: ApplicationStatus) -> ConditionResult:
        raise NotImplementedError

    # ------------------------------------------------------------------ trigger API

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "application_id": self.application_id,
            "stateful_streams_conn_id": self.stateful_streams_conn_id,
            "task_ids": None if self.task_ids is None else list(self.task_ids),
            **self._condition_kwargs(),
            "stale_after": self.stale_after,
            "poll_interval": self.poll_interval,
            "deadline": self.deadline,
            "read_timeout": self.read_timeout,
        })

    def _hook(self) -> StatefulStreamsHook:
        return StatefulStreamsHook(stateful_streams_conn_id=self.stateful_streams_conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self._hook()
        last: tuple[ApplicationStatus, ConditionResult] | None = None
        last_error: str | None = None
        while True:
            read_timeout = self.read_timeout
            if self.deadline is not None:
                left = self.deadline - time.time()
                if left <= 0:
                    yield self._timeout_event(last, last_error)
                    return
                read_timeout = max(1.0, min(read_timeout, left))
            try:
                status = await hook.aget_status(self.application_id, stale_after=timedelta(seconds=self.stale_after),
                                                timeout=timedelta(seconds=read_timeout),
                                                expected_tasks=self.task_ids or ())
                result = self.evaluate(status)
            except TRANSIENT_STATUS_ERRORS as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                self.log.warning("status of %s not readable (retrying in %.0fs): %s", self.application_id,
                                 self.poll_interval, last_error)
            except Exception as exc:  # noqa: BLE001 - reported to the task as an error event
                yield self._event("error", f"{self.condition_name} of application {self.application_id!r}: "
                                           f"cannot read or evaluate its status: {type(exc).__name__}: {exc}",
                                  last[1].table(stuck_only=True) if last else "", last[0] if last else None)
                return
            else:
                last, last_error = (status, result), None
                if result.done:
                    yield self._event("success", result.summary, result.table(), status)
                    return
                self.log.info("%s", result.table())
            sleep = self.poll_interval
            if self.deadline is not None:
                sleep = max(0.0, min(sleep, self.deadline - time.time()))
            await asyncio.sleep(sleep)

    def _timeout_event(self, last: tuple[ApplicationStatus, ConditionResult] | None,
                       last_error: str | None) -> TriggerEvent:
        message = (f"{self.condition_name} of application {self.application_id!r} not reached by the deadline "
                   f"{_deadline_text(self.deadline)}")
        if last_error is not None:
            message += f"; last status read failed: {last_error}"
        if last is None:
            return self._event("timeout", message, "no status was read before the deadline", None)
        status, result = last
        return self._event("timeout", message, result.table(stuck_only=True), status)

    @staticmethod
    def _event(outcome: str, message: str, table: str, status: ApplicationStatus | None) -> TriggerEvent:
        return TriggerEvent({"status": outcome, "message": message, "table": table,
                             "status_json": None if status is None else status.to_json_dict()})


class RestorationTrigger(_StatusConditionTrigger):
    """Fires when :func:`~airflow_stateful_provider.streams.status.conditions.restoration_condition`
    holds (every selected task has a trusted owner, running or restored to within
    ``max_remaining_records``), on timeout, or on an error."""

    condition_name = "restoration"

    def __init__(self, *, max_remaining_records: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_remaining_records = checked_bound("max_remaining_records", max_remaining_records, 0)

    def _condition_kwargs(self) -> dict[str, Any]:
        return {"max_remaining_records": self.max_remaining_records}

    def evaluate(self, status: ApplicationStatus) -> ConditionResult:
        return restoration_condition(status, task_ids=self.task_ids, max_remaining_records=self.max_remaining_records)


class StandbyLagTrigger(_StatusConditionTrigger):
    """Fires when :func:`~airflow_stateful_provider.streams.status.conditions.standby_lag_condition`
    holds (every stateful task has ``min_standbys_per_task`` trusted standbys within
    ``max_lag_records``), on timeout, or on an error."""

    condition_name = "standby lag"

    def __init__(self, *, max_lag_records: int, min_standbys_per_task: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_lag_records = checked_bound("max_lag_records", max_lag_records, 0)
        self.min_standbys_per_task = checked_bound("min_standbys_per_task", min_standbys_per_task, 1)

    def _condition_kwargs(self) -> dict[str, Any]:
        return {"max_lag_records": self.max_lag_records, "min_standbys_per_task": self.min_standbys_per_task}

    def evaluate(self, status: ApplicationStatus) -> ConditionResult:
        return standby_lag_condition(status, max_lag_records=self.max_lag_records,
                                     min_standbys_per_task=self.min_standbys_per_task, task_ids=self.task_ids)
