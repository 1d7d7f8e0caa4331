"""Processes the local services (Kafka broker, Spark cluster, Airflow) run as: free loopback
ports, detached or parent-bound children, and a terminate-then-kill stop."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time

#: How long a service gets to exit after SIGTERM before it is killed.
STOP_GRACE_SECONDS = 15.0


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
