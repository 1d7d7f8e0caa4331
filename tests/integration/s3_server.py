"""A local S3-compatible server for the snapshot tests: moto in server mode, as a process."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_s3_server(work_dir: Path) -> Iterator[str]:
    """Run ``python -m moto.server`` on a free loopback port; yields its endpoint URL."""
    port = free_port()
    log_path = work_dir / "moto.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start:\n{log_path.read_text()}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def s3_storage_options(endpoint: str) -> dict:
    """fsspec (s3fs) options for the moto server: dummy credentials, its endpoint."""
    return {"key": "testing-key-id", "secret": "testing-s3cret-value", "client_kwargs": {"endpoint_url": endpoint}}
