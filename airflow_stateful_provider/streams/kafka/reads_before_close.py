"""Bytes a broker sent just before closing a connection reach the client before the close.

A broker closes a connection right after it answers a failed SASL authentication (after
``connection.failed.authentication.delay.ms``, 100 ms by default); the answer says why
(``invalid_token``, a bad password). kafka-python reads a socket until it would block, and
when that read finds the answer *and* the end of the stream, it drops the answer and reports
only "socket disconnected". A client whose network thread runs later than the broker's
delay (a loaded machine) then loses the reason, and the engine's bootstrap error cannot
name it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["deliver_bytes_read_before_close"]

_installed = False
_install_lock = threading.Lock()


def deliver_bytes_read_before_close() -> None:
    """Make kafka-python's transports hand over the bytes of a read that also found the end
    of the stream, and report the end at the next read (a closed socket stays readable, so
    that read comes at once). Idempotent; applies to every client of the process, which is
    what TCP promises them anyway.

    Checked against kafka-python 3.0.12: ``KafkaTCPTransport._sock_recv()`` (and its
    ``KafkaSSLTransport`` override) returns ``(bytes read, error)``, and the read loop
    ``_read_from_sock()`` aborts the connection on an error without passing the bytes to
    the protocol.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

        for transport in (KafkaTCPTransport, KafkaSSLTransport):
            transport._sock_recv = _bytes_first(transport.__dict__["_sock_recv"])
        _installed = True


def _bytes_first(sock_recv: Callable[[Any], tuple[bytes, Exception | None]]) -> Callable[[Any], Any]:
    """``sock_recv`` returning the bytes without the error when a read found both.
    Checked against kafka-python 3.0.12 (the contract of ``_sock_recv`` above)."""

    @functools.wraps(sock_recv)
    def recv(transport: Any) -> tuple[bytes, Exception | None]:
        data, error = sock_recv(transport)
        if data and error is not None:
            return data, None
        return data, error

    return recv
