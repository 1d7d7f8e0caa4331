"""``stateful-streams``: the on-call command line.

Subcommands (status, stop, stores) arrive with the runtime; for now it reports its version.
"""

from __future__ import annotations

import argparse
import sys

from airflow_stateful_provider import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stateful-streams",
        description="Inspect and control stateful stream applications run by airflow-stateful-provider.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
