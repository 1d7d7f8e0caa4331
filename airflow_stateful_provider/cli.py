"""``stateful-streams``: the on-call command line.

    stateful-streams status <application_id> [--bootstrap-servers H:P] [--client-config FILE] [--json] [--watch SECONDS]
    stateful-streams stores <state_dir> [--json]
    stateful-streams stop <application_id> [--bootstrap-servers H:P] [--client-config FILE] [--instance ID ...] [--timeout SECONDS] [--json]

``status`` answers "which tasks are restoring, how far along, when done, which standbys
lag?" from the application's status topic and live end offsets; instances whose last
document is older than ``--stale-after`` are flagged, never trusted silently. ``stores``
lists the state stores found in a state directory (type, size on disk, live segments,
retention, observed stream time); it opens them read-only, so it works while the
application runs. ``stop`` sends a stop command on the control topic
(docs/control-topic.md) to every live instance, or to the ``--instance`` ones, and waits
until each has stopped cleanly (committed, checkpointed, left the group, removed its status
document). Bootstrap servers default to ``$STATEFUL_STREAMS_BOOTSTRAP_SERVERS``.

Exit codes: 0 success, 1 unknown application or instance, unreadable store, or instances
that did not stop within ``--timeout``; 2 usage or broker unreachable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, TextIO

from airflow_stateful_provider import __version__

BOOTSTRAP_ENV = "STATEFUL_STREAMS_BOOTSTRAP_SERVERS"
CLIENT_CONFIG_ENV = "STATEFUL_STREAMS_CLIENT_CONFIG"


def _add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", default=os.environ.get(BOOTSTRAP_ENV),
                        help=f"host:port[,host:port] (default ${BOOTSTRAP_ENV})")
    parser.add_argument("--client-config", default=os.environ.get(CLIENT_CONFIG_ENV), metavar="FILE",
                        help="JSON object of kafka-python settings for secured clusters, e.g. security_protocol, "
                             f"sasl_mechanism, sasl_plain_username, sasl_plain_password, ssl_cafile "
                             f"(default ${CLIENT_CONFIG_ENV})")


def _client_configs(path: str | None) -> dict[str, Any]:
    """The --client-config file; raises ValueError naming the file and the problem."""
    if not path:
        return {}
    try:
        values = json.loads(open(path, encoding="utf-8").read())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--client-config {path!r}: {exc}") from None
    if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
        raise ValueError(f"--client-config {path!r} must hold a JSON object of kafka-python settings, "
                         f"got {type(values).__name__}")
    values.pop("bootstrap_servers", None)
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stateful-streams",
        description="Inspect stateful stream applications run by airflow-stateful-provider.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    status = commands.add_parser("status", help="restoration progress, owners and standby lag per task")
    status.add_argument("application_id")
    _add_broker_arguments(status)
    status.add_argument("--stale-after", type=float, default=30.0, metavar="SECONDS",
                        help="flag instances whose last status document is older (default 30)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--watch", type=float, metavar="SECONDS", help="refresh every SECONDS until Ctrl-C")

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
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(out)
        return 0
    if args.command in ("status", "stop"):
        try:
            args.client_configs = _client_configs(args.client_config)
        except ValueError as exc:
            parser.error(str(exc))
    if args.command == "status":
        if not args.bootstrap_servers:
            parser.error(f"status needs --bootstrap-servers (or ${BOOTSTRAP_ENV})")
        if args.stale_after <= 0 or (args.watch is not None and args.watch <= 0):
            parser.error("--stale-after and --watch take a positive number of seconds")
        return _status(args, out)
    if args.command == "stop":
        if not args.bootstrap_servers:
            parser.error(f"stop needs --bootstrap-servers (or ${BOOTSTRAP_ENV})")
        if args.timeout <= 0:
            parser.error(f"--timeout takes a positive number of seconds, got {args.timeout:g}")
        return _stop(args, out)
    return _stores(args, out)


def _status(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.errors import BrokerUnreachableError, UnknownApplicationError
    from airflow_stateful_provider.streams.status.reader import fetch_application_status
    from airflow_stateful_provider.streams.status.rendering import render_status_table

    while True:
        try:
            status = fetch_application_status(args.bootstrap_servers, args.application_id,
                                              stale_after_ms=int(args.stale_after * 1000),
                                              client_configs=args.client_configs)
        except UnknownApplicationError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except BrokerUnreachableError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.json:
            out.write(json.dumps(status.to_json_dict(), indent=2, sort_keys=True) + "\n")
        else:
            if args.watch is not None:
                out.write("\033[2J\033[H")  # clear the terminal between refreshes
            # A terminal gets progress bars; a pipe or a file the plain columns.
            out.write(render_status_table(status, bars=_is_terminal(out)) + "\n")
        out.flush()
        if args.watch is None:
            return 0
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0


def _is_terminal(out: TextIO) -> bool:
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


def _stop(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.control.commands import new_command
    from airflow_stateful_provider.streams.errors import (
        BrokerUnreachableError,
        StatusReadTimeoutError,
        UnknownApplicationError,
    )
    from airflow_stateful_provider.streams.control.channel import (
        live_instances,
        send_command,
        wait_for_command,
    )
    from airflow_stateful_provider.streams.status.reader import fetch_application_status

    servers = args.bootstrap_servers
    try:
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
    except (UnknownApplicationError, StatusReadTimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokerUnreachableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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


def _stores(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.errors import StreamsError
    from airflow_stateful_provider.streams.state.store_dir import find_stores, open_store

    if not os.path.isdir(args.state_dir):
        print(f"error: state directory {args.state_dir!r} does not exist", file=sys.stderr)
        return 1
    rows: list[dict[str, Any]] = []
    failures = 0
    for path in find_stores(args.state_dir):
        try:
            store = open_store(path, read_only=True)
            try:
                stats = store.stats()
            finally:
                store.close()
        except (StreamsError, OSError) as exc:
            failures += 1
            rows.append({"path": os.path.relpath(path, args.state_dir), "error": str(exc)})
            continue
        rows.append({
            "path": os.path.relpath(path, args.state_dir), "type": stats.store_type,
            "bytes_on_disk": stats.bytes_on_disk, "entries_estimate": stats.approximate_num_entries,
            "live_segments": len(stats.live_segments), "retention_ms": stats.retention_ms,
            "observed_stream_time": stats.observed_stream_time,
        })
    if args.json:
        out.write(json.dumps(rows, indent=2) + "\n")
    elif not rows:
        out.write(f"no state stores under {args.state_dir}\n")
    else:
        out.write(_stores_table(rows) + "\n")
    return 1 if failures else 0


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
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)


def _size(n: int) -> str:
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
