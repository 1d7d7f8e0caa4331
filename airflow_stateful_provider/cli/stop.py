"""``stateful-streams stop``: a stop command on the control topic to every live instance (or the
``--instance`` ones), waiting until each has stopped cleanly."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO


def run_stop(args: argparse.Namespace, out: TextIO) -> int:
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
