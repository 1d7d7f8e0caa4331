"""free_loopback_port: a free port no outgoing connection can be given meanwhile."""

from __future__ import annotations

import socket

from tools.local_processes import LOWEST_LISTENING_PORT, _ephemeral_ports_start, free_loopback_port


def test_ports_are_free_and_below_the_range_outgoing_connections_take_theirs_from():
    start = _ephemeral_ports_start()
    for _ in range(20):
        port = free_loopback_port()
        assert LOWEST_LISTENING_PORT <= port < start
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listening:
            listening.bind(("127.0.0.1", port))  # free: a service can bind it
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as outgoing, \
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", free_loopback_port()))
        server.listen()
        outgoing.connect(server.getsockname())
        assert outgoing.getsockname()[1] >= start  # where a connection's own port comes from
