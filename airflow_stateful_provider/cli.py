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
application reset tool (cli_reset.py; a dry run unless ``--execute``). ``plan`` compares a new
topology with the one the application last started with (cli_plan.py): stores kept, new,
dropped, changed incompatibly. ``restart --rolling`` restarts the instances one at a time, each
once its tasks have caught-up standbys (cli_restart.py). ``snapshots`` lists the store snapshots of an
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
import json
import os
import sys
import time
from typing import Any, NoReturn, TextIO

from airflow_stateful_provider import __version__
from airflow_stateful_provider.cli_plan import EXIT_INCOMPATIBLE

BOOTSTRAP_ENV = "STATEFUL_STREAMS_BOOTSTRAP_SERVERS"
CLIENT_CONFIG_ENV = "STATEFUL_STREAMS_CLIENT_CONFIG"
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


def _add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conn-id", metavar="CONN_ID",
                        help="read the brokers and security settings from this Airflow connection (type "
                             "stateful_streams: environment, metadata database, secrets backend); needs Airflow")
    parser.add_argument("--bootstrap-servers", help=f"host:port[,host:port] (default ${BOOTSTRAP_ENV})")
    parser.add_argument("--client-config", metavar="FILE",
                        help="JSON object of kafka-python settings for secured clusters, e.g. security_protocol, "
                             f"sasl_mechanism, sasl_plain_username, sasl_plain_password, ssl_cafile "
                             f"(default ${CLIENT_CONFIG_ENV})")


def _connection_settings(conn_id: str) -> tuple[str, dict[str, Any]]:
    """(bootstrap servers, client configs) of an Airflow connection; ConfigError naming it when
    Airflow is missing, the connection unknown or invalid. Airflow's own logging is quieted
    to errors (a warning would land on stdout, in the middle of --json)."""
    from airflow_stateful_provider.streams.errors import ConfigError

    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "ERROR")
    try:
        from airflow.models.connection import Connection

        from airflow_stateful_provider.hooks.stateful_streams import client_configs_from_connection
    except ImportError as exc:
        raise ConfigError(f"--conn-id {conn_id!r} needs Airflow on this machine ({exc}); give --bootstrap-servers "
                          f"and --client-config instead") from None
    try:
        configs = client_configs_from_connection(Connection.get_connection_from_secrets(conn_id))
    except Exception as exc:  # noqa: BLE001 - not found, a secrets backend refusing, a bad connection: named
        raise ConfigError(f"--conn-id {conn_id!r}: {exc} (looked in $AIRFLOW_CONN_{conn_id.upper()}, the metadata "
                          f"database of AIRFLOW_HOME={os.environ.get('AIRFLOW_HOME', '~/airflow')} and the "
                          f"configured secrets backend)") from None
    servers = configs.pop("bootstrap_servers")
    return ",".join(servers), configs


def _json_object_file(path: str, option: str, what: str) -> dict[str, Any]:
    """A file holding a JSON object; raises ConfigError naming the option, the file and the problem."""
    from airflow_stateful_provider.streams.errors import ConfigError

    try:
        with open(path, encoding="utf-8") as handle:
            values = json.load(handle)
    except OSError as exc:
        raise ConfigError(f"{option} {path!r}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{option} {path!r} is not valid JSON: {exc}") from None
    if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
        raise ConfigError(f"{option} {path!r} must hold a JSON object of {what}, got {type(values).__name__}")
    return values


def _client_configs(path: str | None) -> dict[str, Any]:
    """The --client-config file (bootstrap_servers in it is ignored: --bootstrap-servers says
    where); ConfigError naming the file and the setting when one is unknown or mistyped."""
    from airflow_stateful_provider.streams.kafka.client_settings import check_client_settings

    if not path:
        return {}
    values = _json_object_file(path, "--client-config", "kafka-python settings")
    values.pop("bootstrap_servers", None)
    check_client_settings(values, f"--client-config {path!r}")
    return values


def _check_bootstrap_servers(servers: str) -> None:
    from airflow_stateful_provider.streams.config import parse_bootstrap_servers
    from airflow_stateful_provider.streams.errors import ConfigError

    try:
        parse_bootstrap_servers(servers)
    except ConfigError as exc:
        raise ConfigError(f"--bootstrap-servers: {exc}") from None


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
    _add_broker_arguments(status)
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
    _add_broker_arguments(stop)
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
    _add_broker_arguments(query)
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

    from airflow_stateful_provider.cli_reset import add_reset_parser
    from airflow_stateful_provider.cli_restart import add_restart_parser

    add_reset_parser(commands, _add_broker_arguments)
    add_restart_parser(commands, _add_broker_arguments)

    from airflow_stateful_provider.cli_plan import add_plan_parser

    add_plan_parser(commands, _add_broker_arguments)

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
        from airflow_stateful_provider.cli_restart import check_restart_arguments

        check_restart_arguments(parser, args)
    if args.command in ("status", "stop", "query", "reset", "plan", "restart"):
        _kafka_settings(parser, args)
    if args.command == "status":
        from airflow_stateful_provider.cli_status import run_status

        return run_status(args, out)
    if args.command == "stop":
        if args.timeout <= 0:
            parser.error(f"--timeout takes a positive number of seconds, got {args.timeout:g}")
        return _stop(args, out)
    if args.command == "query":
        if (args.key is None) == (args.range is None):
            parser.error("query takes a KEY or --range FROM TO")
        if args.timeout <= 0:
            parser.error(f"--timeout takes a positive number of seconds, got {args.timeout:g}")
        return _query(args, out)
    if args.command == "reset":
        from airflow_stateful_provider.cli_reset import run_reset

        if args.timeout <= 0 or args.stale_after <= 0:
            parser.error("--timeout and --stale-after take a positive number of seconds")
        return run_reset(args, out)
    if args.command == "plan":
        from airflow_stateful_provider.cli_plan import run_plan

        if args.timeout <= 0:
            parser.error(f"--timeout takes a positive number of seconds, got {args.timeout:g}")
        return run_plan(args, out, _json_object_file)
    if args.command == "restart":
        from airflow_stateful_provider.cli_restart import run_restart

        return run_restart(args, out)
    if args.command == "snapshots":
        if args.action == "delete" and args.keep < 1:
            parser.error(f"--keep takes a number >= 1, got {args.keep}")
        return _snapshots(args, out)
    return _stores(args, out)


def _kafka_settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Sets ``args.bootstrap_servers`` and ``args.client_configs`` from --conn-id, or from
    --bootstrap-servers and --client-config (or their environment variables)."""
    if args.conn_id:
        given = [option for option, value in (("--bootstrap-servers", args.bootstrap_servers),
                                              ("--client-config", args.client_config)) if value]
        if given:
            parser.error(f"--conn-id {args.conn_id!r} says where Kafka is and how to log in; "
                         f"drop {' and '.join(given)}")
        args.bootstrap_servers, args.client_configs = _connection_settings(args.conn_id)
        return
    args.bootstrap_servers = args.bootstrap_servers or os.environ.get(BOOTSTRAP_ENV)
    if not args.bootstrap_servers:
        parser.error(f"{args.command} needs --conn-id or --bootstrap-servers (or ${BOOTSTRAP_ENV})")
    _check_bootstrap_servers(args.bootstrap_servers)
    args.client_configs = _client_configs(args.client_config or os.environ.get(CLIENT_CONFIG_ENV))


def _stop(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.control.channel import (
        live_instances,
        send_command,
        wait_for_command,
    )
    from airflow_stateful_provider.streams.control.commands import new_command
    from airflow_stateful_provider.streams.status.reader import fetch_application_status

    servers = args.bootstrap_servers
    read_ms = min(10_000, int(args.timeout * 1000))
    status = fetch_application_status(servers, args.application_id, timeout_ms=read_ms,
                                      client_configs=args.client_configs)
    command = new_command(args.application_id, "stop", instances=args.instances)
    expected = live_instances(status, command)
    unknown = sorted(set(args.instances or ()) - set(expected))
    if unknown:
        print(f"error: no live instance {unknown} in application {args.application_id!r} (live: "
              f"{list(live_instances(status, new_command(args.application_id, 'stop')))})", file=sys.stderr)
        return 1
    send_command(servers, command, timeout_ms=read_ms, client_configs=args.client_configs)
    outcome = wait_for_command(servers, command, instances=expected, timeout_ms=int(args.timeout * 1000),
                               client_configs=args.client_configs)
    rows = {i: {"stopped": i not in outcome.missing,
                "acknowledgement": None if i not in outcome.acknowledgements else outcome.acknowledgements[i].status}
            for i in expected}
    stale = [i.instance_id for i in status.stale_instances if command.applies_to(i.instance_id)]
    if args.json:
        out.write(json.dumps({"application_id": args.application_id, "command_id": command.command_id,
                              "instances": rows, "not_stopped": list(outcome.missing), "stale_not_asked": stale},
                             indent=2, sort_keys=True) + "\n")
    else:
        out.write(f"stop {command.command_id} sent to application {args.application_id}\n")
        for instance_id, row in rows.items():
            if row["stopped"]:
                state = "stopped"
            elif row["acknowledgement"] is None:
                state = f"did not answer within {args.timeout:g}s"
            else:
                state = f"received the command but had not stopped within {args.timeout:g}s"
            out.write(f"  {instance_id}: {state}\n")
        if not expected:
            out.write("  no live instance to stop\n")
        for instance_id in stale:
            out.write(f"  {instance_id}: stale (no recent status document); not waited for\n")
        if outcome.missing:
            out.write(f"not stopped: {', '.join(outcome.missing)}\n")
    out.flush()
    return 1 if outcome.missing else 0


def _query(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.errors import ConfigError
    from airflow_stateful_provider.streams.queries.lookups import lookup_store

    def key(text: str) -> Any:
        if not args.key_json:
            return text
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"--key-json: {text!r} is not JSON ({exc}); quote strings, e.g. '\"user-1\"'") from None

    key_range = None if args.range is None else (None if args.range[0] == "" else key(args.range[0]),
                                                 None if args.range[1] == "" else key(args.range[1]))
    answer = lookup_store(args.bootstrap_servers, args.application_id, args.store,
                          None if args.key is None else key(args.key), key_range=key_range, as_of=args.as_of,
                          allow_stale=args.allow_stale, max_lag=args.max_lag, limit=args.limit,
                          continuation=args.continuation, timeout_ms=int(args.timeout * 1000),
                          client_configs=args.client_configs)
    if args.json:
        out.write(json.dumps(answer, indent=2, sort_keys=True, default=repr) + "\n")
    elif key_range is not None:
        for row in answer["records"]:
            out.write(f"{json.dumps(row['key'], default=repr)}\t{json.dumps(row['value'], default=repr)}\n")
        if answer["continuation"]:
            out.write(f"more: --continue {answer['continuation']}\n")
    else:
        source = f"{answer['instance_id']} task {answer['task_id']}" + (
            f" (standby, {answer['lag']} behind)" if answer["standby"] else "")
        value = json.dumps(answer["value"], default=repr) if answer["found"] else "(not found)"
        out.write(f"{value}\n  from {source}, position {json.dumps(answer['position'])}\n")
    out.flush()
    return 0


def _stores(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.errors import StreamsError
    from airflow_stateful_provider.streams.state.common.metadata import METADATA_FILE_NAME
    from airflow_stateful_provider.streams.state.store_dir import find_stores, find_unrecognized_stores, open_store

    problem = _state_dir_problem(args.state_dir)
    if problem is not None:
        print(f"error: state directory {args.state_dir!r} {problem}", file=sys.stderr)
        return 1
    rows: list[dict[str, Any]] = []
    failures = 0
    # A RocksDB directory without store metadata is a store the engine refuses: listed with the
    # engine's reason, never skipped as if the directory were empty.
    for path in sorted(find_stores(args.state_dir) + find_unrecognized_stores(args.state_dir)):
        try:
            store = open_store(path, read_only=True)
            try:
                stats = store.stats()
            finally:
                store.close()
        except Exception as exc:  # noqa: BLE001 - one store the engine refuses is a row, not the end
            failures += 1
            message = str(exc) if isinstance(exc, (StreamsError, OSError)) else f"{type(exc).__name__}: {exc}"
            rows.append({"path": os.path.relpath(path, args.state_dir), "error": " ".join(message.split())})
            continue
        rows.append({
            "path": os.path.relpath(path, args.state_dir), "type": stats.store_type,
            "bytes_on_disk": stats.bytes_on_disk, "entries_estimate": stats.approximate_num_entries,
            "live_segments": len(stats.live_segments), "retention_ms": stats.retention_ms,
            "observed_stream_time": stats.observed_stream_time,
        })
    if args.json:
        out.write(json.dumps(rows, indent=2) + "\n")
    elif rows:
        out.write(_stores_table(rows) + "\n")
    out.flush()
    if not rows:
        print(f"error: no state store under {args.state_dir}: a state directory holds "
              f"<application_id>/<task>/<store>/ with a {METADATA_FILE_NAME} in each store (give the "
              f"state_dir of a stateful-streams instance, or one store's directory)", file=sys.stderr)
        return 1
    if failures:
        print(f"error: {failures} of {len(rows)} store(s) under {args.state_dir} cannot be opened (their "
              f"rows say why)", file=sys.stderr)
    return 1 if failures else 0


def _state_dir_problem(path: str) -> str | None:
    """Why ``path`` cannot be listed as a state directory, or None."""
    if not os.path.exists(path):
        return "does not exist"
    if not os.path.isdir(path):
        return "is not a directory (give the state_dir, which holds <application_id>/<task>/<store>)"
    try:
        os.listdir(path)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    return None


def _snapshots(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.errors import ConfigError, SnapshotError
    from airflow_stateful_provider.streams.snapshots.catalog import (
        SNAPSHOT_STORAGE_OPTIONS_ENV,
        delete_old_snapshots,
        list_snapshots,
        storage_options_from_env,
    )
    from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
    from airflow_stateful_provider.streams.status.readable import age_text

    if args.storage_options:
        options = _json_object_file(args.storage_options, "--storage-options", "fsspec storage options")
    else:
        try:
            options = storage_options_from_env()
        except SnapshotError as exc:
            raise ConfigError(str(exc)) from None
    storage = SnapshotStorage(args.snapshot_url, options)
    try:
        missing = _missing_snapshots(storage, args.application_id, args.task)
        if missing is not None:
            print(f"error: {missing}", file=sys.stderr)
            return 1
        if args.action == "delete":
            deleted = delete_old_snapshots(storage, args.application_id, args.keep, task_id=args.task,
                                           dry_run=not args.execute)
        else:
            entries = list_snapshots(storage, args.application_id, args.task)
    except SnapshotError:
        raise
    except Exception as exc:  # a storage library's error (credentials, network) named in one line
        raise SnapshotError(f"cannot read snapshots at {args.snapshot_url}: {type(exc).__name__}: {exc} (check the "
                            f"URL, and the storage options in --storage-options or "
                            f"${SNAPSHOT_STORAGE_OPTIONS_ENV}: credentials, endpoint)") from exc
    if args.action == "delete":
        verb = "deleted" if args.execute else "would delete"
        if args.json:
            out.write(json.dumps({"executed": args.execute, "deleted": [d.as_dict() for d in deleted]},
                                 indent=2) + "\n")
        else:
            for info in deleted:
                out.write(f"{verb} {info.task_id}/{info.snapshot_id}{'' if info.complete else ' (partial)'}\n")
            out.write(f"{verb} {len(deleted)} snapshot(s); kept the newest {args.keep} of each task\n")
            if deleted and not args.execute:
                out.write("nothing deleted yet: run again with --execute to delete them\n")
        return 0
    if args.json:
        out.write(json.dumps([e.as_dict() for e in entries], indent=2) + "\n")
        return 0
    if not entries:
        out.write(f"no snapshots of {args.application_id} at {args.snapshot_url}\n")
        return 0
    now = time.time() * 1000
    lines = [("TASK", "SNAPSHOT", "AGE", "SIZE", "OFFSETS", "PROBLEM")]
    for e in entries:
        offsets = ", ".join(f"{store}@{offset}" for store, offset in sorted(e.offsets.items())) or "-"
        lines.append((e.task_id, e.snapshot_id, age_text(int(now - e.taken_at)), "-" if e.total_bytes is None
                      else _size(e.total_bytes), offsets, e.problem or ""))
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out.write("\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                        for line in lines) + "\n")
    return 0


def _missing_snapshots(storage: Any, application_id: str, task_id: str | None) -> str | None:
    """Why there is nothing to list (a location, application or task that does not exist,
    most likely a typo), or None. An application whose directory exists but is empty has none."""
    if not storage.exists():
        return f"snapshot location {storage.url} does not exist (check the URL)"
    tasks = storage.list_tasks(application_id)
    applications = [] if tasks else storage.list_applications()
    if not tasks and application_id not in applications:
        shown = ", ".join(applications[:10]) + (f" and {len(applications) - 10} more" if len(applications) > 10 else "")
        return (f"no snapshots of application {application_id!r} at {storage.url} "
                f"(applications there: {shown or 'none'})")
    if task_id is not None and task_id not in tasks:
        return f"no snapshots of task {task_id} of application {application_id!r} at {storage.url} (tasks: {tasks})"
    return None


def _stores_table(rows: list[dict[str, Any]]) -> str:
    header = ("store", "type", "on disk", "entries~", "segments", "retention", "stream time")
    lines = [header]
    for row in rows:
        if "error" in row:
            lines.append((row["path"], "ERROR", row["error"], "", "", "", ""))
            continue
        lines.append((row["path"], row["type"], _size(row["bytes_on_disk"]), str(row["entries_estimate"]),
                      str(row["live_segments"]), _duration(row["retention_ms"]),
                      _timestamp(row["observed_stream_time"])))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 3_600_000:g} h" if ms >= 3_600_000 else f"{ms / 60_000:g} min" if ms >= 60_000 else f"{ms} ms"


def _timestamp(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + " UTC"


if __name__ == "__main__":
    sys.exit(main())
