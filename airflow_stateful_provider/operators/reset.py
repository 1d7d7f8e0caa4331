"""``ResetApplicationOperator``: start an application over from a DAG, as
``stateful-streams reset`` does (streams/reset/, docs/runbook.md "Reset an application").

The usual DAG: stop the application (``stateful-streams stop`` or ``on_kill`` of its
SubmitTopologyOperator), reset it, submit it again. Like SnapshotRetentionOperator, it acts
unless ``dry_run=True`` (the command line is the other way round: it only plans unless
``--execute``): a task named "reset" in a DAG is the decision.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.operators.maintenance_arguments import is_template
from airflow_stateful_provider.streams.durations import seconds_arg_ms

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["ResetApplicationOperator"]


class ResetApplicationOperator(BaseOperator):
    """Reset ``application_id``: its input offsets (to the earliest, ``to_datetime`` or now
    minus ``by_duration``), its internal topics deleted, its local state under ``state_dir``
    removed. Fails (nothing changed) while an instance is live or its group has members.

    :param application_id: the application (templated).
    :param to_datetime: input offsets to the first record at or after this aware datetime or
        ISO-8601 string with an offset (templated: ``"{{ data_interval_start }}"``).
    :param by_duration: input offsets to the first record at or after now minus this: seconds,
        a timedelta, or an ISO-8601 duration string (``"PT1H"``; templated). Neither: the earliest.
    :param input_topics: the input topics (list or ``"a,b"``; templated); None: every
        non-internal topic the application's group committed offsets on.
    :param state_dir: the state_dir of instances on this worker (templated); None: no local state removed.
    :param stateful_streams_conn_id: connection of type ``stateful_streams``.
    :param timeout: bound of each broker request and of the topic deletion (seconds or a timedelta).
    :param stale_after: an instance whose status document is older counts as gone (seconds or a timedelta).
    :param dry_run: plan and log only; change nothing.

    Returns (XCom) the plan as JSON: ``offsets`` (topic, partition, current, target),
    ``topics_to_delete``, ``state_dirs_to_remove``, ``executed``.
    """

    template_fields: Sequence[str] = ("application_id", "to_datetime", "by_duration", "input_topics", "state_dir",
                                      "stateful_streams_conn_id")
    ui_color = "#f4d8d8"

    def __init__(self, *, application_id: str, to_datetime: datetime | str | None = None,
                 by_duration: float | timedelta | str | None = None, input_topics: str | Sequence[str] | None = None,
                 state_dir: str | os.PathLike[str] | None = None,
                 stateful_streams_conn_id: str = StatefulStreamsHook.default_conn_name,
                 timeout: float | timedelta = timedelta(seconds=60),
                 stale_after: float | timedelta = timedelta(seconds=30),
                 dry_run: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not application_id:
            raise ValueError(f"{self.task_id}: application_id is required")
        if to_datetime is not None and by_duration is not None:
            raise ValueError(f"{self.task_id}: give to_datetime or by_duration, not both")
        self.application_id = application_id
        self.to_datetime = to_datetime
        self.by_duration = by_duration
        self.input_topics = input_topics if input_topics is None or isinstance(input_topics, str) \
            else list(input_topics)
        self.state_dir = None if state_dir is None else os.fspath(state_dir)
        self.stateful_streams_conn_id = stateful_streams_conn_id
        self.timeout_ms = seconds_arg_ms(timeout, "timeout", minimum_ms=1)
        self.stale_after_ms = seconds_arg_ms(stale_after, "stale_after", minimum_ms=1)
        self._dry_run = dry_run  # not self.dry_run: that is BaseOperator's dry_run() method
        if by_duration is not None and not is_template(by_duration):
            self._duration()

    @cached_property
    def hook(self) -> StatefulStreamsHook:
        return StatefulStreamsHook(stateful_streams_conn_id=self.stateful_streams_conn_id)

    def _duration(self) -> float | timedelta | str | None:
        """by_duration as reset_application takes it: a number (also a rendered "3600") is seconds."""
        from airflow_stateful_provider.streams.reset.plan import parse_duration

        value = self.by_duration
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if value is None:
            return None
        return parse_duration(value)

    def _topics(self) -> list[str] | None:
        if self.input_topics is None:
            return None
        names = self.input_topics.split(",") if isinstance(self.input_topics, str) else self.input_topics
        return [name.strip() for name in names if name.strip()]

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_stateful_provider.streams.reset.application_reset import reset_application

        configs = self.hook.get_client_configs()
        plan = reset_application(
            configs.pop("bootstrap_servers"), self.application_id, execute=not self._dry_run,
            to_datetime=self.to_datetime or None, by_duration=self._duration(), input_topics=self._topics(),
            state_dir=self.state_dir or None, client_configs=configs, timeout_ms=self.timeout_ms,
            stale_after_ms=self.stale_after_ms)
        self.log.info("%s", plan.text().replace("add --execute to carry it out", "dry_run=True"))
        if plan.refused:
            raise AirflowException(f"reset of application {self.application_id!r} refused, nothing changed: "
                                   + "; ".join(plan.refusals))
        return plan.to_json_dict()
