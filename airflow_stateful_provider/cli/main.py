"""``stateful-streams``: the on-call command line.

    stateful-streams status <application_id> [KAFKA] [--json]
                            [--watch SECONDS | --check [--max-standby-lag N] [--max-input-lag N]]
    stateful-streams stores <state_dir> [--json]
    stateful-streams stop <application_id> [KAFKA] [--instance ID ...] [--timeout SECONDS] [--json]
    stateful-streams query <application_id> <store> [KEY] [KAFKA] [--range FROM TO] [--as-of TS]
                           [--allow-stale [--max-lag N]] [--limit N] [--continue TOKEN] [--key-json]
                           [--timeout SECONDS] [--json]
    stateful-streams reset <application_id> [KAFKA] [--to-datetime ISO | --by-duration PnDTnHnMnS]
                           [--input-topics T,...] [--state-dir DIR] [--execute] [--timeout SECONDS] [--json]
    stateful-streams plan <application_id> --topology package.module:function [KAFKA] [--streams-config FILE]
                          [--timeout SECONDS] [--json]
    stateful-streams restart <application_id> --rolling [KAFKA] [--instance ID ...] [--max-lag-records N]
                             [--step-timeout SECONDS] [--json]
    stateful-streams snapshots list <snapshot_url> <application_id> [--task ID] [--storage-options FILE] [--json]
    stateful-streams snapshots delete <snapshot_url> <application_id> --keep K [--task ID] [--execute]
                                      [--storage-options FILE] [--json]

    KAFKA: --conn-id CONN_ID (an Airflow connection, where Airflow is installed) or
           --bootstrap-servers H:P [--client-config FILE]

``status`` answers "which tasks are restoring, how far along, when done, which standbys
lag?" from the application's status topic and live end offsets; instances whose last
document is older than ``--stale-after`` are flagged, never trusted silently. ``stores``
lists the state stores found in a state directory (type, size on disk, live segments,
retention, observed stream time); it opens them read-only, so it works while the
application runs. ``stop`` sends a stop command on the control topic
(docs/control-topic.md) to every live instance, or to the ``--instance`` ones, and waits
until each has stopped cleanly (committed, checkpointed, left the group, removed its status
document). ``query`` reads live store state of a running application over its query topics
(docs/interactive-queries.md): a key's value, the version valid at ``--as-of``, a key's
sessions, or a page of a key range. ``reset`` starts an application over, as Kafka's
application reset tool (cli/reset.py; a dry run unless ``--execute``). ``plan`` compares a new
topology with the one the application last started with (cli/plan.py): stores kept, new,
dropped, changed incompatibly. ``restart --rolling`` restarts the instances one at a time, each
once its tasks have caught-up standbys (cli/restart.py). ``snapshots`` lists the store snapshots of an
application on shared storage (docs/snapshots.md: age, size, changelog offsets, and why a restore would skip one) and
plans the deletion of all but the newest K per task, which ``--execute`` carries out.
Bootstrap servers default to ``$STATEFUL_STREAMS_BOOTSTRAP_SERVERS``; ``--conn-id`` reads
them and the security settings (SASL, SSL) from an Airflow connection of type
``stateful_streams`` instead. Snapshot storage options (credentials) come from
``--storage-options`` or ``$STATEFUL_STREAMS_SNAPSHOT_STORAGE_OPTIONS`` (JSON).

``status --check`` is a health check (streams/status/health.py): exit 0 when healthy, 1 with
the reasons on stderr when an instance is stale or failing, a task is unassigned or lost its
state, or a given bound (``--max-standby-lag``, ``--max-input-lag``) is exceeded.

Exit codes (EXIT_CODES): 0 success or healthy; 1 unhealthy, unknown application or instance,
missing snapshot location, unreadable store, instances that did not stop within
``--timeout``, or any other failure; 2 usage (bad arguments, a bad ``--client-config`` or
``--storage-options`` file, an unknown ``--conn-id``); 3 Kafka unreachable; 4 (``plan``) a change
the application's state cannot follow. Every error is
one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn, TextIO

from airflow_stateful_provider import __version__
from airflow_stateful_provider.cli.kafka_settings import add_broker_arguments, kafka_settings
from airflow_stateful_provider.cli.plan import EXIT_INCOMPATIBLE, add_plan_parser, run_plan
from airflow_stateful_provider.cli.query import run_query
from airflow_stateful_provider.cli.reset import add_reset_parser, run_reset
from airflow_stateful_provider.cli.restart import add_restart_parser, check_restart_arguments, run_restart
from airflow_stateful_provider.cli.snapshots import run_snapshots
from airflow_stateful_provider.cli.status import run_status
from airflow_stateful_provider.cli.stop import run_stop
from airflow_stateful_provider.cli.stores import run_stores

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_KAFKA_UNREACHABLE = 0, 1, 2, 3
EXIT_CODES = f"""exit codes:
  {EXIT_OK}  success (status --check: healthy)
  {EXIT_FAILURE}  failure (status --check: unhealthy, the reasons on stderr; unknown application)
  {EXIT_USAGE}  usage: bad arguments, settings files or --conn-id
  {EXIT_KAFKA_UNREACHABLE}  Kafka unreachable (or its answers did not arrive in time)
  {EXIT_INCOMPATIBLE}  plan: the new topology changes a store in a way its data cannot follow
"""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, with a usage error on one line of stderr (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="stateful-streams",
        description="Inspect stateful stream applications run by airflow-stateful-provider.",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    status = commands.add_parser("status", help="restoration progress, owners and standby lag per task; a health "
                                 "check with --check", epilog=EXIT_CODES,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    status.add_argument("application_id")
    add_broker_arguments(status)
    status.add_argument("--stale-after", type=float, default=30.0, metavar="SECONDS",
                        help="flag instances whose last status document is older (default 30)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--watch", type=float, metavar="SECONDS",
                        help="refresh every SECONDS until Ctrl-C (redrawn on a terminal, appended otherwise)")
    status.add_argument("--check", action="store_true",
                        help="health check: exit 0 when healthy, 1 with the reasons on stderr when an instance is "
                             "stale or failing, a task unassigned or its state lost, or a bound below exceeded")
    status.add_argument("--max-standby-lag", type=int, metavar="OFFSETS",
                        help="with --check: unhealthy when a standby lags more (default: not checked)")
    status.add_argument("--max-input-lag", type=int, metavar="RECORDS",
                        help="with --check: unhealthy when a task's input lags more (default: not checked)")

    stop = commands.add_parser("stop", help="stop instances cleanly through the control topic")
    stop.add_argument("application_id")
    add_broker_arguments(stop)
    stop.add_argument("--instance", action="append", metavar="ID", dest="instances",
                      help="stop only this instance (repeatable; default every live instance)")
    stop.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                      help="how long to wait for the instances to stop (default 120)")
    stop.add_argument("--json", action="store_true", help="machine-readable output")

    stores = commands.add_parser("stores", help="state stores in a state directory (read-only)")
    stores.add_argument("state_dir")
    stores.add_argument("--json", action="store_true", help="machine-readable output")

    query = commands.add_parser("query", help="read live store state of a running application by key or range")
    query.add_argument("application_id")
    query.add_argument("store")
    query.add_argument("key", nargs="?", help="the key (a string; with --key-json, JSON such as 42)")
    add_broker_arguments(query)
    query.add_argument("--range", nargs=2, metavar=("FROM", "TO"), help="entries with FROM <= key <= TO ('' = open)")
    query.add_argument("--as-of", type=int, metavar="TS", help="versioned store: the version valid at epoch ms TS")
    query.add_argument("--allow-stale", action="store_true", help="let a standby answer (see --max-lag)")
    query.add_argument("--max-lag", type=int, default=10_000, metavar="N",
                       help="with --allow-stale: most changelog records a standby may be behind (default 10000)")
    query.add_argument("--limit", type=int, default=100, metavar="N", help="range: records per page (default 100)")
    query.add_argument("--continue", dest="continuation", metavar="TOKEN", help="range: the next page's token")
    query.add_argument("--key-json", action="store_true", help="parse KEY and the range ends as JSON")
    query.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                       help="how long to wait for an answer (default 10)")
    query.add_argument("--json", action="store_true", help="machine-readable output")

    add_reset_parser(commands)
    add_restart_parser(commands)
    add_plan_parser(commands)

    snapshots = commands.add_parser("snapshots", help="store snapshots on shared storage: list, delete old ones")
    actions = snapshots.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (("list", "every snapshot per task, newest first"),
                       ("delete", "delete all but the newest --keep complete snapshots of each task")):
        action = actions.add_parser(name, help=text)
        action.add_argument("snapshot_url", help="e.g. file:///mnt/shared/snapshots or s3://bucket/prefix")
        action.add_argument("application_id")
        action.add_argument("--task", metavar="ID", help="only this task (e.g. 0_3)")
        action.add_argument("--storage-options", metavar="FILE",
                            help="JSON object of fsspec storage options (default $STATEFUL_STREAMS_SNAPSHOT_"
                                 "STORAGE_OPTIONS)")
        action.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "delete":
            action.add_argument("--keep", type=int, required=True, metavar="K", help="snapshots kept per task (>= 1)")
            action.add_argument("--execute", action="store_true",
                                help="delete; without it the command only lists what it would delete")
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(out)
        return 0
    try:
        return _run(parser, args, out)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - whatever happens, one line on stderr and no traceback
        return _report(exc)


def _report(exc: Exception) -> int:
    """Print ``exc`` as one line on stderr; returns the exit code (EXIT_CODES): usage for a bad
    setting, Kafka unreachable for brokers that do not answer in time, failure for anything
    else (a library's error is named by its type)."""
    from airflow_stateful_provider.streams.errors import (
        BrokerUnreachableError,
        ConfigError,
        StatusReadTimeoutError,
        StreamsError,
    )

    message = str(exc) if isinstance(exc, StreamsError) else f"{type(exc).__name__}: {exc}"
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    if isinstance(exc, ConfigError):
        return EXIT_USAGE
    if isinstance(exc, (BrokerUnreachableError, StatusReadTimeoutError)):
        return EXIT_KAFKA_UNREACHABLE
    return EXIT_FAILURE


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "status":
        if args.stale_after <= 0 or (args.watch is not None and args.watch <= 0):
            parser.error("--stale-after and --watch take a positive number of seconds")
        if args.check and args.watch is not None:
            parser.error("--check answers once; it does not combine with --watch")
        for option, value in (("--max-standby-lag", args.max_standby_lag), ("--max-input-lag", args.max_input_lag)):
            if value is not None and (not args.check or value < 0):
                parser.error(f"{option} takes a number >= 0 and goes with --check, got {value}"
                             + ("" if args.check else " without --check"))
    if args.command == "restart":
        check_restart_arguments(parser, args)
    if args.command in ("status", "stop", "query", "reset", "plan", "restart"):
        kafka_settings(parser, args)
    if args.command == "query" and (args.key is None) == (args.range is None):
        parser.error("query takes a KEY or --range FROM TO")
    if args.command in ("stop", "query", "plan") and args.timeout <= 0:
        parser.error(f"--timeout takes a positive number of seconds, got {args.timeout:g}")
    if args.command == "reset" and (args.timeout <= 0 or args.stale_after <= 0):
        parser.error("--timeout and --stale-after take a positive number of seconds")
    if args.command == "snapshots" and args.action == "delete" and args.keep < 1:
        parser.error(f"--keep takes a number >= 1, got {args.keep}")
    return _RUNNERS[args.command](args, out)


#: What each command runs once its arguments are checked.
_RUNNERS: dict[str, Callable[[argparse.Namespace, TextIO], int]] = {
    "status": run_status, "stop": run_stop, "query": run_query, "reset": run_reset, "plan": run_plan,
    "restart": run_restart, "snapshots": run_snapshots, "stores": run_stores,
}
