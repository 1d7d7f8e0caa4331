"""A read that finds a broker's last answer and the end of the stream hands over the answer
first (streams/kafka/reads_before_close.py)."""

from __future__ import annotations

import socket

from kafka.errors import KafkaConnectionError
from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

from airflow_stateful_provider.streams.kafka.reads_before_close import _bytes_first, deliver_bytes_read_before_close


class Transport:
    """What kafka-python's ``_sock_recv`` reads from: a real socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock


def test_the_answer_comes_first_and_the_close_at_the_next_read():
    broker, client = socket.socketpair()
    client.setblocking(False)
    broker.sendall(b"the answer")
    broker.close()
    read = _bytes_first(KafkaTCPTransport.__dict__["_sock_recv"])
    transport = Transport(client)
    assert read(transport) == (b"the answer", None)
    data, error = read(transport)
    assert data == b"" and isinstance(error, KafkaConnectionError) and "socket disconnected" in str(error)
    client.close()


def test_reads_without_a_close_are_unchanged():
    broker, client = socket.socketpair()
    client.setblocking(False)
    read = _bytes_first(KafkaTCPTransport.__dict__["_sock_recv"])
    transport = Transport(client)
    assert read(transport) == (b"", None)  # nothing there yet: kafka-python waits again
    broker.sendall(b"part")
    assert read(transport) == (b"part", None)
    broker.close()
    client.close()


def test_installing_twice_wraps_once():
    deliver_bytes_read_before_close()
    first = (KafkaTCPTransport._sock_recv, KafkaSSLTransport._sock_recv)
    deliver_bytes_read_before_close()
    assert (KafkaTCPTransport._sock_recv, KafkaSSLTransport._sock_recv) == first
    assert all(getattr(function, "__wrapped__", None) is not None for function in first)
