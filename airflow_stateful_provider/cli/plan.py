"""``stateful-streams plan``: what deploying a topology does to an application's state
(streams/redeploy/), compared with the topology it last started with.

    stateful-streams plan <application_id> --topology package.module:function [KAFKA]
                          [--streams-config FILE] [--timeout SECONDS] [--json]

Reads only. Exit 0 when the new topology is compatible (every store kept, new or dropped), 4
when a store or repartition topic changes in a way its data cannot follow (the plan says
which and why), 1 when nothing is recorded for the application or another failure, 2 usage
(a bad reference, settings file or argument), 3 Kafka unreachable. 4, not 2 as in other
plan tools: 2 is already this command line's usage error, and a script must tell the two apart.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from airflow_stateful_provider.cli.kafka_settings import add_broker_arguments, json_object_file

__all__ = ["EXIT_INCOMPATIBLE", "add_plan_parser", "run_plan"]

#: The plan found a change the data cannot follow.
EXIT_INCOMPATIBLE = 4


def add_plan_parser(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser(
        "plan", help="what deploying a topology does to the application's state: stores kept, new, dropped, changed "
                     f"incompatibly (exit {EXIT_INCOMPATIBLE}); reads only")
    plan.add_argument("application_id")
    plan.add_argument("--topology", required=True, metavar="MODULE:FUNCTION",
                      help="package.module:function returning the new Topology (or StreamsBuilder), importable here")
    add_broker_arguments(plan)
    plan.add_argument("--streams-config", metavar="FILE",
                      help="JSON object of the StreamsConfig the application runs with (its default serdes and "
                           "default_dsl_store decide what unset store serdes and implementations are)")
    plan.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                      help="bound of each broker read (default 30)")
    plan.add_argument("--json", action="store_true", help="machine-readable output")


def streams_config_values(application_id: str, bootstrap_servers: str, values: dict[str, Any]) -> dict[str, Any]:
    """The StreamsConfig values of the plan: the given ones, with the command's application id
    and brokers (ConfigError when the file names another application)."""
    from airflow_stateful_provider.streams.errors import ConfigError

    if values.get("application_id", application_id) != application_id:
        raise ConfigError(f"application_id {values['application_id']!r} is another application than "
                          f"{application_id!r}")
    return {**values, "application_id": application_id, "bootstrap_servers": bootstrap_servers}


def run_plan(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.config import StreamsConfig
    from airflow_stateful_provider.streams.errors import ConfigError, TopologyError
    from airflow_stateful_provider.streams.redeploy.planner import plan_topology_change
    from airflow_stateful_provider.streams.runner import load_topology

    given = json_object_file(args.streams_config, "--streams-config", "StreamsConfig values") \
        if args.streams_config else {}
    try:
        config = StreamsConfig.from_mapping(streams_config_values(args.application_id, args.bootstrap_servers, given))
    except ConfigError as exc:
        raise ConfigError(f"--streams-config: {exc}") from None
    try:
        topology = load_topology(args.topology, config)
    except TopologyError as exc:
        raise ConfigError(f"--topology {args.topology!r}: {exc}") from None
    plan = plan_topology_change(topology, config, client_configs=args.client_configs,
                                timeout_ms=int(args.timeout * 1000))
    out.write((json.dumps(plan.to_json_dict(), indent=2) if args.json else plan.text()) + "\n")
    out.flush()
    return 0 if plan.compatible else EXIT_INCOMPATIBLE
