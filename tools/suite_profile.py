"""Where the test suite's time and CPU go, by module: a pytest plugin and its report.

The suite is CPU-bound on two cores, and most of its CPU is spent by processes the tests
start (brokers, instances, Spark, Airflow), not by pytest itself, so ``--durations`` alone
does not say which modules to make cheaper. The plugin records, for each test, its wall time
and the CPU seconds of the worker's whole process tree while it ran (the worker, its running
descendants and the children they waited for; a module fixture's start-up and stop count in
the module's first and last test)::

    python -m pytest -p tools.suite_profile -n 4 --dist loadfile --no-loadscope-reorder
    python -m tools.suite_profile report          # CPU-s and wall s per module, most CPU first

``SUITE_PROFILE_DIR`` (default ``.local/suite-profile``) holds one file per worker; remove it
before a new run.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

import pytest

from tools.local_processes import process_cpu_seconds

DEFAULT_DIR = Path(".local/suite-profile")


def profile_dir() -> Path:
    return Path(os.environ.get("SUITE_PROFILE_DIR", DEFAULT_DIR))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Wall and process-tree CPU seconds of one test, set-up and tear-down included."""
    pid = os.getpid()
    began, cpu = time.monotonic(), process_cpu_seconds(pid, descendants=True)
    yield
    wall, used = time.monotonic() - began, process_cpu_seconds(pid, descendants=True) - cpu
    directory = profile_dir()
    directory.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(directory / f"{worker}.tsv", "a", encoding="utf-8") as out:
        out.write(f"{item.nodeid}\t{wall:.2f}\t{used:.2f}\n")


def per_module(directory: Path) -> list[tuple[str, float, float]]:
    """(module, CPU seconds, wall seconds) of each module recorded in ``directory``, most CPU first."""
    cpu: dict[str, float] = collections.defaultdict(float)
    wall: dict[str, float] = collections.defaultdict(float)
    for path in sorted(directory.glob("*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            nodeid, seconds, used = line.rsplit("\t", 2)
            module = nodeid.split("::", 1)[0]
            wall[module] += float(seconds)
            cpu[module] += float(used)
    return sorted(((module, cpu[module], wall[module]) for module in cpu), key=lambda row: -row[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.suite_profile", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["report"])
    parser.add_argument("--dir", type=Path, default=None, help=f"the recorded run (default: {DEFAULT_DIR})")
    parser.add_argument("--top", type=int, default=30, help="modules shown (default 30)")
    args = parser.parse_args(argv)
    directory = args.dir or profile_dir()
    rows = per_module(directory)
    if not rows:
        print(f"no recorded tests in {directory} (run pytest with -p tools.suite_profile)", file=sys.stderr)
        return 1
    total_cpu, total_wall = sum(row[1] for row in rows), sum(row[2] for row in rows)
    print(f"{'CPU s':>8} {'share':>6} {'wall s':>8}  module")
    for module, used, seconds in rows[:args.top]:
        print(f"{used:8.0f} {used / total_cpu:6.1%} {seconds:8.0f}  {module}")
    print(f"{total_cpu:8.0f} {1:6.0%} {total_wall:8.0f}  all {len(rows)} modules (wall: summed over the workers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
