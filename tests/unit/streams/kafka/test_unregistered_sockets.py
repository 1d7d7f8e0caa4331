"""The engine's selector answers as the standard library's does, without building the
socket's repr for "not registered" (kafka/unregistered_sockets.py); every client built by the
engine gets it (kafka/net_client.py). Real sockets, no broker."""

from __future__ import annotations

import selectors
import socket

import pytest

from airflow_stateful_provider.streams.kafka.unregistered_sockets import CheapLookupSelector


class CountedReprSocket(socket.socket):
    """A socket that counts how often its repr is built."""

    reprs = 0

    def __repr__(self) -> str:
        CountedReprSocket.reprs += 1
        return super().__repr__()


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    counted = CountedReprSocket(fileno=a.detach())
    yield counted, b
    counted.close()
    b.close()


def test_a_registered_socket_has_the_same_key_as_with_the_default_selector(pair):
    sock, _ = pair
    for selector in (CheapLookupSelector(), selectors.DefaultSelector()):
        with selector:
            selector.register(sock, selectors.EVENT_READ, "reader")
            key = selector.get_key(sock)
            assert (key.fileobj, key.fd, key.events, key.data) == (sock, sock.fileno(), selectors.EVENT_READ, "reader")


def test_an_unregistered_socket_is_a_key_error_holding_it_and_its_repr_is_never_built(pair):
    sock, other = pair
    CountedReprSocket.reprs = 0
    with CheapLookupSelector() as selector:
        selector.register(other, selectors.EVENT_READ)
        for _ in range(3):
            with pytest.raises(KeyError) as raised:
                selector.get_key(sock)
            assert raised.value.args == (sock,)
        selector.register(sock, selectors.EVENT_WRITE)
        selector.unregister(sock)
        with pytest.raises(KeyError):
            selector.get_key(sock)
    assert CountedReprSocket.reprs == 0
    with selectors.DefaultSelector() as selector, pytest.raises(KeyError):
        selector.get_key(sock)
    assert CountedReprSocket.reprs == 2  # the standard library's message, built twice


def test_a_closed_selector_and_a_closed_socket_fail_as_with_the_default_selector(pair):
    sock, _ = pair
    selector = CheapLookupSelector()
    selector.close()
    with pytest.raises(RuntimeError, match="Selector is closed"):
        selector.get_key(sock)
    sock.close()
    with CheapLookupSelector() as open_selector, pytest.raises(ValueError):
        open_selector.get_key(sock)  # fileno -1 and never registered: "Invalid file descriptor"


def test_the_engine_network_client_uses_it_and_keeps_a_selector_the_user_chose():
    from airflow_stateful_provider.streams.kafka.net_client import engine_net_client

    class MySelector(selectors.DefaultSelector):
        pass

    for given, expected in ((selectors.DefaultSelector, CheapLookupSelector), (MySelector, MySelector)):
        client = engine_net_client(bootstrap_servers=["127.0.0.1:1"], selector=given)
        try:
            assert type(client._net._selector) is expected
        finally:
            client.close()
