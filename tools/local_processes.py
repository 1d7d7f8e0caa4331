"""Processes the local services (Kafka broker, Spark cluster, Airflow) run as: free loopback
ports (below the ephemeral range), detached or parent-bound children, a
terminate-then-kill stop, and a process's state and CPU time as /proc shows them."""

from __future__ import annotations

import ctypes
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

#: How long a service gets to exit after SIGTERM before it is killed.
STOP_GRACE_SECONDS = 15.0


#: The lowest port a listening service of ours takes: below it are the ports other software
#: may expect to find free.
LOWEST_LISTENING_PORT = 10_000
#: Random picks before giving up (the range holds over 20,000 ports).
_PORT_PICKS = 1_000


def free_loopback_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range. A port the kernel handed
    out (bind to port 0) comes from that range, which is also where every outgoing connection
    gets its local port: in the seconds between picking it and the service (a broker's JVM,
    after its storage tool) binding it, one of the many client connections the tests open
    could take it ("Address already in use", seen once in a full run with four workers). A
    port below the range is never given to a connection; the random pick keeps the test
    workers, each picking its own, from choosing the same one."""
    highest = _ephemeral_ports_start() - 1
    for _ in range(_PORT_PICKS):
        port = random.randint(LOWEST_LISTENING_PORT, highest)
        if not port_in_use(port):
            return port
    raise RuntimeError(f"no free loopback port between {LOWEST_LISTENING_PORT} and {highest} "
                       f"after {_PORT_PICKS} random picks")


def _ephemeral_ports_start() -> int:
    """The first port of Linux's ephemeral range (32768 when it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def another_free_port(taken: set[int | None]) -> int:
    """A free loopback port not in ``taken``, which it is added to (a process's several ports)."""
    port = free_loopback_port()
    while port in taken:
        port = free_loopback_port()
    taken.add(port)
    return port


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def own_process_group() -> None:
    """Runs in a detached child: no terminal Ctrl-C reaches it; the tool's `stop` command ends it."""
    os.setpgrp()


def die_with_parent() -> None:
    """Runs in the child: Linux sends it SIGTERM when the Python parent dies (even by SIGKILL)."""
    os.setpgrp()  # a terminal Ctrl-C goes to the Python parent, whose clean-up stops the child
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def terminate(pid: int, wait, grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; ``wait(timeout=)`` waits for the exit."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)
        wait(timeout=STOP_GRACE_SECONDS)


def process_state(pid: int) -> str:
    """The one-letter state of a Linux process (R running, S sleeping, T stopped, Z zombie...)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0]


def process_cpu_seconds(pid: int, *, descendants: bool = False) -> float:
    """User + system CPU seconds a running process has used (Linux /proc): the progress of
    a child that only computes. With ``descendants``, also those of its running descendants
    and of the children they waited for (a step that runs a compiler or a build backend)."""
    if not descendants:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:  # ended meanwhile
                continue
    tree = {pid}
    for process in sorted(stats):  # a child's id is above its parent's, but for wrap-around
        if int(stats[process][1]) in tree:
            tree.add(process)
    ticks = sum(int(value) for process in tree & stats.keys() for value in stats[process][11:15])
    return ticks / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


def wait_pid(pid: int):
    """A ``wait(timeout=)`` for a process that is not our child (started by an earlier command)."""
    def wait(timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        raise subprocess.TimeoutExpired(f"pid {pid}", timeout)
    return wait
