"""``stateful-streams query``: live store state of a running application over its query topics
(docs/interactive-queries.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO


def run_query(args: argparse.Namespace, out: TextIO) -> int:
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
