"""``stateful-streams status``: the snapshot once, refreshed (``--watch``), or as a health check
(``--check``).

On a terminal the tables are drawn with ``rich`` (progress bars, colours) and ``--watch``
redraws them in place; on a pipe or a file the plain fixed-width table of
streams/status/rendering.py is printed, and ``--watch`` appends one after the other, each
under a time stamp line, with no escape codes. While watching, a status read that fails for
a reason that may pass (brokers unreachable, the application not started yet) is shown in
place of the table and the watch goes on.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from airflow_stateful_provider.streams.status.application import ApplicationStatus, TaskStatus

__all__ = ["render_rich_status", "run_status"]

_STATE_STYLES = {"running": "green", "restoring": "yellow", "created": "cyan", "suspended": "magenta"}


def run_status(args: argparse.Namespace, out: TextIO) -> int:
    from airflow_stateful_provider.streams.status.reader import fetch_application_status

    def read() -> ApplicationStatus:
        return fetch_application_status(args.bootstrap_servers, args.application_id,
                                        stale_after_ms=int(args.stale_after * 1000),
                                        client_configs=args.client_configs)

    if args.check:
        return _check(args, out, read)
    if args.watch is not None:
        return _watch(args, out, read)
    _show(read(), args, out)
    return 0


def _is_terminal(out: TextIO) -> bool:
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


def _show(status: ApplicationStatus, args: argparse.Namespace, out: TextIO) -> None:
    from airflow_stateful_provider.streams.status.rendering import render_status_table

    if args.json:
        out.write(json.dumps(status.to_json_dict(), indent=2, sort_keys=True) + "\n")
    elif _is_terminal(out):
        from rich.console import Console

        Console(file=out).print(render_rich_status(status))
    else:
        out.write(render_status_table(status) + "\n")
    out.flush()


def _check(args: argparse.Namespace, out: TextIO, read: Callable[[], ApplicationStatus]) -> int:
    """Exit 0 when healthy; 1 with the problems on one line of stderr when not (an
    application without live instances included). Unreachable brokers are the caller's."""
    from airflow_stateful_provider.streams.errors import UnknownApplicationError
    from airflow_stateful_provider.streams.status.health import application_health

    try:
        status = read()
    except UnknownApplicationError as exc:
        print(f"unhealthy: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    verdict = application_health(status, max_standby_lag=args.max_standby_lag, max_input_lag=args.max_input_lag)
    if args.json:
        out.write(json.dumps(status.to_json_dict() | {"healthy": verdict.healthy, "problems": list(verdict.problems)},
                             indent=2, sort_keys=True) + "\n")
    else:
        out.write(verdict.summary + "\n")
    out.flush()
    if verdict.healthy:
        return 0
    print(f"unhealthy: {'; '.join(verdict.problems)}", file=sys.stderr)
    return 1


def _watch(args: argparse.Namespace, out: TextIO, read: Callable[[], ApplicationStatus]) -> int:
    from airflow_stateful_provider.streams.status.conditions import TRANSIENT_STATUS_ERRORS

    def attempt() -> ApplicationStatus | str:
        try:
            return read()
        except TRANSIENT_STATUS_ERRORS as exc:
            return f"{type(exc).__name__}: {' '.join(str(exc).split())} (retrying every {args.watch:g}s)"

    stop = _CtrlC()
    try:
        if _is_terminal(out) and not args.json:
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text

            with Live(console=Console(file=out), auto_refresh=False) as live:
                while not stop.is_set():
                    got = attempt()
                    live.update(Text(got, style="red") if isinstance(got, str) else render_rich_status(got),
                                refresh=True)
                    stop.wait(args.watch)
            return 0
        while not stop.is_set():
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC\n")
            got = attempt()
            if isinstance(got, str):
                out.write(got + "\n")
                out.flush()
            else:
                _show(got, args, out)
            stop.wait(args.watch)
        return 0
    except KeyboardInterrupt:  # a second Ctrl-C, or no handler could be installed
        return 0
    finally:
        stop.restore()


class _CtrlC(threading.Event):
    """Set by the first Ctrl-C, which then gives SIGINT back to its previous handler:
    ``--watch`` stops between two reads, as a KeyboardInterrupt inside a read would leave its
    Kafka client half-closed, and its network thread could keep the process alive."""

    def __init__(self) -> None:
        super().__init__()
        self._previous: Any = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._interrupted)

    def _interrupted(self, signum: int, frame: Any) -> None:
        self.set()
        self.restore()

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None



def render_rich_status(status: ApplicationStatus) -> Any:
    """The status as rich tables: tasks (restoration as a progress bar, standby lag, input
    lag), then instances (age of their last document, processing rate)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from airflow_stateful_provider.streams.status.readable import age_text, rate_text
    from airflow_stateful_provider.streams.status.rendering import restoration_cells

    lost = status.state_lost_tasks
    headline = (f"application {status.application_id}: {len(status.instances)} instance(s)"
                f"{f' ({len(status.stale_instances)} stale)' if status.stale_instances else ''}, "
                f"{len(status.tasks)} task(s) ({len(status.restoring_tasks)} restoring, "
                f"{len(status.unassigned_tasks)} unassigned{f', {len(lost)} STATE LOST' if lost else ''})")
    tasks = Table(title=headline, title_justify="left", expand=False)
    for column in ("TASK", "ACTIVE", "STATE", "RESTORATION", "RATE", "ETA", "STANDBYS (LAG)", "INPUT LAG", "NOTES"):
        tasks.add_column(column, overflow="fold")
    for task in status.tasks:
        progress, rate, eta = restoration_cells(task.restoration)
        active = "-" if task.active is None else f"{task.active.instance_id}@{task.active.host}"
        tasks.add_row(task.task_id, active, Text(task.state, style=_STATE_STYLES.get(task.state, "bold red")),
                      _restoration_cell(task, progress), rate, eta, _standbys_cell(task),
                      "-" if task.input_lag is None else f"{task.input_lag:,}", "; ".join(task.notes))
    instances = Table(expand=False)
    for column in ("INSTANCE", "HOST", "PID", "EPOCH", "STATE", "GUARANTEE", "PUBLISHED", "TASKS (A/S/W)",
                   "PROCESSED"):
        instances.add_column(column)
    for i in status.instances:
        published = Text(f"{age_text(i.age_ms)} ago" + (" STALE" if i.stale else ""),
                         style="bold red" if i.stale else "")
        processed = rate_text(sum(t.process_rate for t in i.threads)) if i.threads else "-"
        instances.add_row(i.instance_id, i.host, str(i.pid), str(i.epoch), i.state, i.processing_guarantee,
                          published, f"{len(i.active_tasks)}/{len(i.standby_tasks)}/{len(i.warmup_tasks)}", processed)
    return Group(tasks, instances)


def _restoration_cell(task: TaskStatus, progress: str) -> Any:
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    restoration = task.restoration
    if restoration is None:
        return progress
    cell = Table.grid(padding=(0, 1))
    bar = ProgressBar(total=None if restoration.total is None else max(1, restoration.total),
                      completed=restoration.restored, width=20)
    cell.add_row(bar, progress)
    return cell


def _standbys_cell(task: TaskStatus) -> Any:
    from rich.text import Text

    if not task.standbys:
        return "-"
    text = Text()
    for n, s in enumerate(task.standbys):
        if n:
            text.append(", ")
        lag = "?" if s.lag is None else f"{s.lag:,}"
        text.append(("warmup " if s.warmup else "") + f"{s.instance_id} ({lag})",
                    style="red" if s.stale or s.lag is None else "")
    return text
