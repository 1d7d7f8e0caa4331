"""``stateful-streams restart``: restart an application's instances one at a time, each only
once its active tasks have caught-up standbys elsewhere (streams/control/rolling_restart.py,
docs/rolling-restart.md).

    stateful-streams restart <application_id> --rolling [KAFKA] [--instance ID ...] [--max-lag-records N]
                             [--step-timeout SECONDS] [--stale-after SECONDS] [--json]

Each step is printed as it happens (with ``--json``, one JSON report at the end). Exit 0 when
every instance is back, 1 when a step did not finish in time or an instance is unknown (the
message names it, what was missing and who was already restarted), 2 usage, 3 Kafka unreachable.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from airflow_stateful_provider.cli.kafka_settings import add_broker_arguments

__all__ = ["add_restart_parser", "check_restart_arguments", "run_restart"]


def add_restart_parser(commands: argparse._SubParsersAction) -> None:
    restart = commands.add_parser(
        "restart", help="restart instances one at a time (--rolling), each once its tasks have caught-up standbys")
    restart.add_argument("application_id")
    add_broker_arguments(restart)
    restart.add_argument("--rolling", action="store_true", required=True,
                         help="one instance at a time, waiting for standbys before and for RUNNING after each "
                              "(the only mode; required, so that a restart is never all at once by mistake)")
    restart.add_argument("--instance", action="append", metavar="ID", dest="instances",
                         help="restart only this instance (repeatable, in this order; default every live instance)")
    restart.add_argument("--max-lag-records", type=int, default=10_000, metavar="N",
                         help="a standby within N changelog offsets of the end counts as caught up (default 10000, "
                              "Kafka Streams' acceptable.recovery.lag)")
    restart.add_argument("--step-timeout", type=float, default=300.0, metavar="SECONDS",
                         help="bound of each wait: for standbys before an instance, for it after (default 300)")
    restart.add_argument("--stale-after", type=float, default=15.0, metavar="SECONDS",
                         help="an instance whose status document is older is not trusted (default 15)")
    restart.add_argument("--json", action="store_true", help="machine-readable report at the end")


def check_restart_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse bad values before anything is read or sent."""
    if args.max_lag_records < 0:
        parser.error(f"--max-lag-records takes a number >= 0, got {args.max_lag_records}")
    if args.step_timeout <= 0 or args.stale_after <= 0:
        parser.error("--step-timeout and --stale-after take a positive number of seconds")


def run_restart(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.control.rolling_restart import rolling_restart

    def progress(line: str) -> None:
        if not args.json:
            out.write(line + "\n")
            out.flush()

    report = rolling_restart(args.bootstrap_servers, args.application_id, instances=args.instances,
                             max_lag_records=args.max_lag_records, step_timeout_ms=int(args.step_timeout * 1000),
                             stale_after_ms=int(args.stale_after * 1000), client_configs=args.client_configs,
                             progress=progress)
    out.write((json.dumps(report.to_json_dict(), indent=2) if args.json else report.text()) + "\n")
    out.flush()
    return 0
