"""``stateful-streams reset``: Kafka's application reset tool for this engine
(streams/reset/): a dry run by default that prints what it would do; ``--execute`` does it.

    stateful-streams reset <application_id> [KAFKA] [--to-datetime ISO | --by-duration PnDTnHnMnS]
                           [--input-topics T[,T...]] [--state-dir DIR] [--execute] [--timeout SECONDS] [--json]

Exit 0 when planned (dry run) or done, 1 when refused (a live instance or group member: the
plan is printed under REFUSED and nothing changes) or unknown, 2 usage, 3 Kafka unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from airflow_stateful_provider.cli.kafka_settings import add_broker_arguments

__all__ = ["add_reset_parser", "run_reset"]


def add_reset_parser(commands: argparse._SubParsersAction) -> None:
    reset = commands.add_parser(
        "reset", help="start an application over (Kafka's application reset tool): input offsets, internal topics, "
                      "local state; a dry run unless --execute")
    reset.add_argument("application_id")
    add_broker_arguments(reset)
    where = reset.add_mutually_exclusive_group()
    where.add_argument("--to-datetime", metavar="ISO",
                       help="input offsets to the first record at or after this time, with an offset "
                            "(2026-01-31T08:00:00Z); default: the earliest offsets")
    where.add_argument("--by-duration", metavar="DURATION",
                       help="input offsets to the first record at or after now minus this ISO-8601 duration "
                            "(PT1H, P1DT12H)")
    where.add_argument("--to-earliest", action="store_true", help="input offsets to the earliest (the default)")
    reset.add_argument("--input-topics", metavar="T[,T...]",
                       help="the input topics whose offsets move (default: every non-internal topic the group "
                            "has committed offsets on)")
    reset.add_argument("--state-dir", metavar="DIR",
                       help="remove the application's local state under DIR (<DIR>/<application_id>, and "
                            "<DIR>/*/<application_id> of instances on Spark)")
    reset.add_argument("--execute", action="store_true",
                       help="carry the reset out; without it the command only prints what it would do")
    reset.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                       help="bound of each broker request and of the topic deletion (default 60)")
    reset.add_argument("--stale-after", type=float, default=30.0, metavar="SECONDS",
                       help="an instance whose status document is older counts as gone (default 30)")
    reset.add_argument("--json", action="store_true", help="machine-readable output")


def run_reset(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.reset.application_reset import reset_application

    inputs = None if args.input_topics is None else [t.strip() for t in args.input_topics.split(",") if t.strip()]
    plan = reset_application(
        args.bootstrap_servers, args.application_id, execute=args.execute, to_datetime=args.to_datetime,
        by_duration=args.by_duration, input_topics=inputs, state_dir=args.state_dir,
        client_configs=args.client_configs, timeout_ms=int(args.timeout * 1000),
        stale_after_ms=int(args.stale_after * 1000))
    out.write((json.dumps(plan.to_json_dict(), indent=2) if args.json else plan.text()) + "\n")
    out.flush()
    if plan.refused:
        print(f"error: application {args.application_id!r} is running; nothing was changed (the reasons are "
              f"above, under REFUSED; stop it first: stateful-streams stop {args.application_id})", file=sys.stderr)
        return 1
    return 0
