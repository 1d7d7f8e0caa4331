"""How kafka-python's transports read their sockets: 256 KiB at a time, and a broker's last
bytes delivered before its close.

- **Larger reads.** kafka-python 3.0.12 empties a readable socket with ``recv(4096)`` until it
  would block: a 1 MiB fetch response is 256 turns of a Python loop in the client's I/O
  thread, each holding the interpreter lock the stream thread needs. With batches decoded in
  C (batch_decoding.py) that I/O thread took a third as much CPU as a restoring stream thread
  (py-spy); the same loop reads 256 KiB at a time here.
- **Bytes before the close.** A broker closes a connection right after it answers a failed
  SASL authentication (after ``connection.failed.authentication.delay.ms``, 100 ms by
  default); the answer says why (``invalid_token``, a bad password). When one read finds the
  answer *and* the end of the stream, kafka-python drops the answer and reports only "socket
  disconnected"; a client whose network thread runs later than the broker's delay (a loaded
  machine) then loses the reason, and the engine's bootstrap error cannot name it. Here the
  bytes are handed over and the end is reported at the next read (a closed socket stays
  readable, so that read comes at once).
"""

from __future__ import annotations

import logging
import ssl
import threading
from typing import Any

__all__ = ["READ_BYTES", "install_socket_reads"]

#: Most bytes one ``recv`` asks for.
READ_BYTES = 256 * 1024

_WOULD_BLOCK_TCP = (BlockingIOError, InterruptedError)
_WOULD_BLOCK_TLS = (*_WOULD_BLOCK_TCP, ssl.SSLWantReadError, ssl.SSLWantWriteError)

_installed = False
_install_lock = threading.Lock()


def install_socket_reads() -> None:
    """Give kafka-python's TCP and TLS transports these reads. Idempotent; applies to every
    client of the process, which is what TCP promises them anyway.

    Checked against kafka-python 3.0.12: ``KafkaTCPTransport._sock_recv()`` (and its
    ``KafkaSSLTransport`` override, which also stops on ``SSLWantReadError`` and
    ``SSLWantWriteError``) returns ``(bytes read, KafkaConnectionError or None)`` and logs
    with its module's logger; the read loop ``_read_from_sock()`` aborts the connection on an
    error without passing the bytes to the protocol.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        from kafka.net import transport

        log = transport.log
        transport.KafkaTCPTransport._sock_recv = _reads(_WOULD_BLOCK_TCP, log)
        transport.KafkaSSLTransport._sock_recv = _reads(_WOULD_BLOCK_TLS, log)
        _installed = True


def _reads(would_block: tuple[type[BaseException], ...], log: logging.Logger) -> Any:
    def _sock_recv(self: Any) -> tuple[bytes, Exception | None]:
        """Read until the socket would block; the bytes read, and the error that ended the
        reads only when none were read. Checked against kafka-python 3.0.12 (the contract of
        ``_sock_recv`` above)."""
        from kafka.errors import KafkaConnectionError

        received = []
        error = None
        while True:
            try:
                data = self._sock.recv(READ_BYTES)
            except would_block:
                break
            except BaseException as exc:  # as kafka-python: any failure closes the connection
                log.exception("%s: Error receiving network data closing socket", self)
                error = KafkaConnectionError(exc)
                break
            if not data:
                log.error("%s: socket disconnected", self)
                error = KafkaConnectionError("socket disconnected")
                break
            received.append(data)
        if received:
            return b"".join(received), None  # the error comes again at the next read
        return b"", error

    return _sock_recv
