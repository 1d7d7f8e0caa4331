"""What the restoration and standby-lag sensors share: reading the status through the
hook, logging the progress table on every poke, deferring to a status trigger, and
failing with the table of the stuck tasks on timeout (poke, reschedule and deferrable).
Their task instances link to the application's "Stateful streams" page and its Spark UI
(links/stateful_streams.py): the sensor records the Spark UI address the instances report."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, conf
from airflow.sdk.exceptions import AirflowException, AirflowSensorTimeout

from airflow_stateful_provider.hooks.stateful_streams import (
    DEFAULT_READ_TIMEOUT,
    DEFAULT_STALE_AFTER,
    StatefulStreamsHook,
)
from airflow_stateful_provider.links.stateful_streams import (
    SPARK_UI_XCOM,
    SparkUILink,
    StatefulStreamsPageLink,
    spark_ui_url,
)
from airflow_stateful_provider.streams.durations import seconds_arg_ms
from airflow_stateful_provider.streams.status.application import ApplicationStatus
from airflow_stateful_provider.streams.status.conditions import (
    TRANSIENT_STATUS_ERRORS,
    ConditionResult,
    normalize_task_ids,
)

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

    from airflow_stateful_provider.streams.task_id import TaskId

__all__ = ["StatusConditionSensor", "DEFERRAL_TIMEOUT_GRACE"]

#: Airflow's own deferral timeout is set this much after the trigger's deadline, so the
#: trigger's timeout event (with the table of stuck tasks) arrives first; Airflow's fires
#: only if the triggerer could not run the trigger.
DEFERRAL_TIMEOUT_GRACE = timedelta(seconds=60)


class StatusConditionSensor(BaseSensorOperator):
    """Base of the sensors over an application's status topic; subclasses define
    :meth:`evaluate` (a pure condition) and :meth:`build_trigger`.

    :param application_id: the application (its status topic is ``<application_id>-status``).
    :param task_ids: only these tasks (``["0_0", "0_1"]`` or ``"0_0,0_1"``); None: all.
    :param stale_after: a document older than this is stale and never trusted (seconds or a
        timedelta, as every duration here).
    :param stateful_streams_conn_id: connection of type ``stateful_streams``.
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param poll_interval: seconds between status reads, in every mode (sets ``poke_interval``;
        give one of the two).
    :param read_timeout: bound of one status read (seconds or a timedelta).
    """

    template_fields: Sequence[str] = ("application_id", "task_ids", "stateful_streams_conn_id")
    ui_color = "#d7ecf4"
    operator_extra_links = (StatefulStreamsPageLink(), SparkUILink())

    def __init__(
        self,
        *,
        application_id: str,
        task_ids: str | Iterable[str | TaskId] | None = None,
        stale_after: float | timedelta = DEFAULT_STALE_AFTER,
        stateful_streams_conn_id: str = StatefulStreamsHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float | timedelta | None = None,
        read_timeout: float | timedelta = DEFAULT_READ_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        if poll_interval is not None:
            given = kwargs.get("poke_interval")
            if given is not None and self._coerce_poke_interval(given) != self._coerce_poke_interval(poll_interval):
                raise ValueError(f"poll_interval {poll_interval!r} and poke_interval {given!r} disagree; give one")
            kwargs["poke_interval"] = poll_interval
        else:
            kwargs.setdefault("poke_interval", 30)
        super().__init__(**kwargs)
        self.application_id = application_id
        self.task_ids = task_ids if task_ids is None or isinstance(task_ids, str) else list(task_ids)
        self.stale_after_ms = seconds_arg_ms(stale_after, "stale_after", minimum_ms=1)
        self.read_timeout_ms = seconds_arg_ms(read_timeout, "read_timeout", minimum_ms=1)
        self.stateful_streams_conn_id = stateful_streams_conn_id
        self.deferrable = deferrable
        if self.poke_interval <= 0:
            raise ValueError(f"poll_interval must be > 0 seconds, got {self.poke_interval!r}")
        self._last_result: ConditionResult | None = None
        self._last_error: str | None = None
        self._spark_ui_url: str | None = None

    @cached_property
    def hook(self) -> StatefulStreamsHook:
        return StatefulStreamsHook(stateful_streams_conn_id=self.stateful_streams_conn_id)

    def _selected_task_ids(self) -> tuple[str, ...] | None:
        """task_ids after template rendering, validated."""
        return normalize_task_ids(self.task_ids)

    # ------------------------------------------------------------------ subclass API

    def evaluate(self, status: ApplicationStatus) -> ConditionResult:
        raise NotImplementedError

    def build_trigger(self, deadline: float) -> BaseTrigger:
        raise NotImplementedError

    def _trigger_kwargs(self, deadline: float) -> dict[str, Any]:
        selected = self._selected_task_ids()
        return {"application_id": self.application_id, "stateful_streams_conn_id": self.stateful_streams_conn_id,
                "task_ids": None if selected is None else list(selected), "stale_after": self.stale_after_ms / 1000,
                "poll_interval": float(self.poke_interval), "deadline": deadline,
                "read_timeout": self.read_timeout_ms / 1000}

    # ------------------------------------------------------------------ poke mode

    def poke(self, context: Context) -> bool:
        """Read the status once, log the progress table, return whether the condition holds.
        A transient read failure (not published yet, brokers unreachable) is logged and
        counts as not done; the timeout message names it."""
        selected = self._selected_task_ids()
        try:
            status = self.hook.get_status(self.application_id, stale_after=timedelta(milliseconds=self.stale_after_ms),
                                          timeout=timedelta(milliseconds=self.read_timeout_ms),
                                          expected_tasks=selected or ())
        except TRANSIENT_STATUS_ERRORS as exc:
            self._last_error = f"{type(exc).__name__}: {exc}"
            self.log.warning("status of %s not readable yet: %s", self.application_id, self._last_error)
            return False
        self._record_spark_ui(context, spark_ui_url(status))
        result = self.evaluate(status)
        self._last_result, self._last_error = result, None
        self.log.info("%s", result.table())
        return result.done

    def _record_spark_ui(self, context: Context, url: str | None) -> None:
        """XCom ``spark_ui_url`` for the task's Spark UI link, once per address."""
        if url and url != self._spark_ui_url:
            context["ti"].xcom_push(key=SPARK_UI_XCOM, value=url)
            self._spark_ui_url = url

    def _stuck_text(self) -> str:
        parts = []
        if self._last_result is not None:
            parts.append(self._last_result.table(stuck_only=True))
        if self._last_error is not None:
            parts.append(f"last status read failed: {self._last_error}")
        return "\n".join(parts) or "no status was read"

    def execute(self, context: Context) -> None:
        if not self.deferrable:
            try:
                super().execute(context)
            except AirflowSensorTimeout as exc:
                raise AirflowSensorTimeout(f"{exc}\n{self._stuck_text()}") from exc
            return None
        deadline = time.time() + self.timeout
        if self.poke(context):
            return None
        self.defer(trigger=self.build_trigger(deadline), method_name="execute_complete",
                   timeout=timedelta(seconds=self.timeout) + DEFERRAL_TIMEOUT_GRACE)

    # ------------------------------------------------------------------ deferrable mode

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        """Resume after the trigger: success returns; a timeout raises AirflowSensorTimeout
        and an error AirflowException, both with the table of the tasks not done."""
        if not isinstance(event, dict) or "status" not in event:
            raise AirflowException(f"{self.task_id}: unexpected trigger event {event!r}")
        outcome, message, table = event["status"], event.get("message", ""), event.get("table", "")
        instances = (event.get("status_json") or {}).get("instances") or []
        self._record_spark_ui(context, next((i["host_application"]["ui_url"] for i in instances
                                             if not i.get("stale") and (i.get("host_application") or {}).get("ui_url")),
                                            None))
        if outcome == "success":
            self.log.info("%s\n%s", message, table)
            return None
        text = f"{message}\n{table}" if table else message
        if outcome == "timeout":
            raise AirflowSensorTimeout(text)
        raise AirflowException(text)
