"""kafka-python's transports with this engine's socket reads (streams/kafka/socket_reads.py)
return the bytes kafka-python's own would, in 256 KiB reads, and a broker's last answer
before its close: checked on real socket pairs."""

from __future__ import annotations

import select
import socket
import threading
import time
from types import SimpleNamespace

import pytest
from kafka.errors import KafkaConnectionError
from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

from airflow_stateful_provider.streams.kafka.socket_reads import READ_BYTES, install_socket_reads

install_socket_reads()
read = KafkaTCPTransport._sock_recv


class CountingSocket:
    """A non-blocking socket that counts its ``recv`` calls."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.reads = sock, 0

    def recv(self, size: int) -> bytes:
        self.reads += 1
        return self.sock.recv(size)


@pytest.fixture
def pair():
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    yield reader, writer
    reader.close()
    writer.close()


def wait_readable(sock: socket.socket, size: int) -> None:
    """Until ``size`` bytes are buffered on the non-blocking ``sock``; 10 s without a new byte
    fails."""
    buffered, progressed_at = -1, time.monotonic()
    while buffered < size:
        assert time.monotonic() - progressed_at < 10, f"{max(buffered, 0)} of {size} bytes after 10 s without more"
        select.select([sock], [], [], 0.1)
        try:
            now = len(sock.recv(size, socket.MSG_PEEK))
        except BlockingIOError:  # nothing buffered yet
            now = 0
        if now > buffered:
            buffered, progressed_at = now, time.monotonic()
        elif now:
            time.sleep(0.005)  # readable but short: select would return at once


def test_reads_what_was_sent_in_large_reads(pair):
    reader, writer = pair
    payload = bytes(range(256)) * 4096  # 1 MiB
    sender = threading.Thread(target=writer.sendall, args=(payload,))
    sender.start()
    received, reads = b"", 0
    while len(received) < len(payload):
        wait_readable(reader, 1)
        counting = CountingSocket(reader)
        data, error = read(SimpleNamespace(_sock=counting))
        assert error is None
        received += data
        reads += counting.reads
    sender.join()
    assert received == payload
    assert reads < len(payload) // 4096, reads  # kafka-python's 4 KiB reads: 256 or more


def test_nothing_buffered_is_nothing_read_and_no_error(pair):
    reader, writer = pair
    transport = SimpleNamespace(_sock=reader)
    assert read(transport) == (b"", None)  # kafka-python waits for the socket again
    writer.sendall(b"part")
    wait_readable(reader, 4)
    assert read(transport) == (b"part", None)


def test_the_answer_before_a_close_comes_first_and_the_close_at_the_next_read(pair):
    reader, writer = pair
    writer.sendall(b"the answer")
    writer.close()
    wait_readable(reader, len(b"the answer"))
    transport = SimpleNamespace(_sock=reader)
    assert read(transport) == (b"the answer", None)
    data, error = read(transport)
    assert data == b"" and isinstance(error, KafkaConnectionError) and "socket disconnected" in str(error)


def test_a_failed_read_is_a_connection_error():
    class Broken:
        def recv(self, size: int) -> bytes:
            raise ConnectionResetError("reset by peer")

    data, error = KafkaSSLTransport._sock_recv(SimpleNamespace(_sock=Broken()))
    assert data == b"" and isinstance(error, KafkaConnectionError) and "reset by peer" in str(error)


def test_installing_twice_installs_once():
    first = (KafkaTCPTransport._sock_recv, KafkaSSLTransport._sock_recv)
    install_socket_reads()
    assert (KafkaTCPTransport._sock_recv, KafkaSSLTransport._sock_recv) == first
    assert READ_BYTES == 256 * 1024
