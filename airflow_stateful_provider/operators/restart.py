"""``RollingRestartOperator``: restart an application's instances one at a time from a DAG, as
``stateful-streams restart --rolling`` does (streams/control/rolling_restart.py,
docs/rolling-restart.md): a host patch, a new provider version on the workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.streams.durations import seconds_arg_ms
from airflow_stateful_provider.streams.errors import RollingRestartError, UnknownApplicationError
from airflow_stateful_provider.streams.status.conditions import checked_bound

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["RollingRestartOperator"]


class RollingRestartOperator(BaseOperator):
    """Restart the live instances of ``application_id`` (or ``instances``, in that order) one at a
    time: each once every stateful active task of it has a standby elsewhere within
    ``max_lag_records`` offsets (the StandbyLagSensor's condition), then until it is back RUNNING
    with a higher epoch and the group has settled. Fails at the first step that does not finish
    within ``step_timeout``, naming the instance, what was missing and who was already restarted.

    :param application_id: the application (templated).
    :param instances: the instances to restart, in order (list or ``"a,b"``; templated); None: every live one.
    :param max_lag_records: a standby within this many changelog offsets counts as caught up.
    :param step_timeout: bound of each wait, before and after each instance (seconds or a timedelta).
    :param stale_after: an instance whose status document is older is not trusted (seconds or a timedelta).
    :param stateful_streams_conn_id: connection of type ``stateful_streams``.

    Returns (XCom) the report: ``restarts`` (instance_id, old_epoch, new_epoch, active_tasks,
    standby_wait_s, restart_s), ``seconds``.
    """

    template_fields: Sequence[str] = ("application_id", "instances", "stateful_streams_conn_id")
    ui_color = "#f4e8d8"

    def __init__(self, *, application_id: str, instances: str | Sequence[str] | None = None,
                 max_lag_records: int = 10_000, step_timeout: float | timedelta = timedelta(minutes=5),
                 stale_after: float | timedelta = timedelta(seconds=15),
                 stateful_streams_conn_id: str = StatefulStreamsHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not application_id:
            raise ValueError(f"{self.task_id}: application_id is required")
        self.application_id = application_id
        self.instances = instances if instances is None or isinstance(instances, str) else list(instances)
        self.max_lag_records = checked_bound("max_lag_records", max_lag_records, 0)
        self.step_timeout_ms = seconds_arg_ms(step_timeout, "step_timeout", minimum_ms=1)
        self.stale_after_ms = seconds_arg_ms(stale_after, "stale_after", minimum_ms=1)
        self.stateful_streams_conn_id = stateful_streams_conn_id

    @cached_property
    def hook(self) -> StatefulStreamsHook:
        return StatefulStreamsHook(stateful_streams_conn_id=self.stateful_streams_conn_id)

    def _instances(self) -> list[str] | None:
        if self.instances is None:
            return None
        names = self.instances.split(",") if isinstance(self.instances, str) else self.instances
        return [name.strip() for name in names if name.strip()] or None

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_stateful_provider.streams.control.rolling_restart import rolling_restart

        configs = self.hook.get_client_configs()
        try:
            report = rolling_restart(configs.pop("bootstrap_servers"), self.application_id,
                                     instances=self._instances(), max_lag_records=self.max_lag_records,
                                     step_timeout_ms=self.step_timeout_ms, stale_after_ms=self.stale_after_ms,
                                     client_configs=configs, progress=lambda line: self.log.info("%s", line))
        except (RollingRestartError, UnknownApplicationError) as exc:
            raise AirflowException(str(exc)) from exc
        self.log.info("%s", report.text())
        return report.to_json_dict()
