"""The plan SubmitTopologyOperator makes before it submits (streams/redeploy/,
docs/redeploying.md): the topology compared with the one the application last started with.

A compatible plan (stores kept, new or dropped) lets the submission go on. An incompatible
one fails the task before anything is submitted, unless ``on_incompatible="reset"``: then the
application is reset as ResetApplicationOperator does it (input offsets to the earliest,
internal topics deleted, local state on this worker removed) and starts over from its input.
The plan goes to the task log and to XCom (``topology_plan``; None on a first deploy).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.streams.redeploy.plan import INCOMPATIBLE

if TYPE_CHECKING:
    from airflow_stateful_provider.streams.redeploy.plan import TopologyPlan

__all__ = ["ON_INCOMPATIBLE", "TOPOLOGY_PLAN_XCOM", "act_on_plan", "check_on_incompatible", "make_plan"]

#: What SubmitTopologyOperator does on an incompatible plan.
ON_INCOMPATIBLE = ("fail", "reset")
TOPOLOGY_PLAN_XCOM = "topology_plan"
#: Bound of each broker read of the plan.
PLAN_TIMEOUT_MS = 30_000


def check_on_incompatible(value: Any, task_id: str) -> str:
    if value not in ON_INCOMPATIBLE:
        raise ValueError(f"{task_id}: on_incompatible must be one of {list(ON_INCOMPATIBLE)}, got {value!r}")
    return str(value)


def make_plan(log: Any, hook: StatefulStreamsHook, topology: str, values: Mapping[str, Any]) -> TopologyPlan | None:
    """The plan of deploying ``topology`` with the streams config ``values``, logged; None when
    nothing is recorded (a first deploy, or after a reset). AirflowException when it cannot be made."""
    from airflow_stateful_provider.streams.config import StreamsConfig
    from airflow_stateful_provider.streams.errors import NoRecordedTopologyError, StreamsError
    from airflow_stateful_provider.streams.redeploy.planner import plan_topology_change
    from airflow_stateful_provider.streams.runner import load_topology

    config = StreamsConfig.from_mapping(values)
    try:
        plan = plan_topology_change(load_topology(topology, config), config, client_configs=_security(hook),
                                    timeout_ms=PLAN_TIMEOUT_MS)
    except NoRecordedTopologyError as exc:
        log.info("no topology plan: %s", exc)
        return None
    except StreamsError as exc:
        raise AirflowException(f"cannot plan deploying {topology} as {values['application_id']!r}: {exc}") from None
    log.info("%s", plan.text())
    return plan


def act_on_plan(log: Any, hook: StatefulStreamsHook, plan: TopologyPlan, topology: str, values: Mapping[str, Any],
                on_incompatible: str) -> None:
    """Nothing for a compatible plan. For an incompatible one: AirflowException with
    ``on_incompatible="fail"``; the application's reset with ``"reset"`` (AirflowException
    when the reset is refused)."""
    from airflow_stateful_provider.streams.reset.application_reset import reset_application

    if plan.compatible:
        return
    application_id = values["application_id"]
    incompatible = [s.name for s in plan.stores if s.verdict == INCOMPATIBLE] + \
        [t.topic for t in plan.repartition_topics if t.verdict == INCOMPATIBLE]
    if on_incompatible == "fail":
        raise AirflowException(f"deploying {topology} as {application_id!r} changes {incompatible} in a way their "
                               f"data cannot follow (the plan is above and in XCom {TOPOLOGY_PLAN_XCOM!r}); nothing "
                               f"was submitted. Set on_incompatible='reset' to start the application over from its "
                               f"input, or deploy a topology that keeps them")
    state_dir = values.get("state_dir")
    local = state_dir if isinstance(state_dir, str) and os.path.isdir(state_dir) else None
    log.warning("on_incompatible='reset': resetting %s before submitting (incompatible: %s)", application_id,
                incompatible)
    reset = reset_application(values["bootstrap_servers"], application_id, execute=True, state_dir=local,
                              client_configs=_security(hook))
    log.info("%s", reset.text())
    if reset.refused:
        raise AirflowException(f"reset of application {application_id!r} refused, nothing submitted: "
                               + "; ".join(reset.refusals))


def _security(hook: StatefulStreamsHook) -> dict[str, Any]:
    """The connection's client settings (with its secrets), without the brokers."""
    configs = hook.get_client_configs()
    configs.pop("bootstrap_servers")
    return configs
