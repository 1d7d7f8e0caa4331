"""A producer waits out a broker's reconnect backoff instead of polling through it.

kafka-python 3.0.12's network client (``KafkaNetClient.connection_delay``) answers in seconds,
what its connection manager keeps, while its one caller that uses the value, the producer's
sender, takes it as milliseconds (``node_delay_ms``), as the 2.x client answered: with a
batch waiting for a broker in its reconnect backoff (up to a second), the sender polls for a
thousandth of the backoff, over and over: one producer whose only broker was down made about
370 passes a second, 8% of a core (tests/integration/test_producer_close.py counts them).
The group coordinator's use (``connection_delay(node) > 0``) does not depend on the unit.
"""

from __future__ import annotations

from typing import Any

__all__ = ["connection_delay_in_ms"]


def connection_delay_in_ms(client: Any) -> None:
    """Make ``client`` (a ``KafkaNetClient``) answer ``connection_delay`` in milliseconds.
    Checked against kafka-python 3.0.12: ``KafkaConnectionManager.connection_delay`` returns
    the seconds left of a node's backoff, ``KafkaNetClient.connection_delay`` passes them on,
    ``Sender._send_producer_data`` polls for that many milliseconds."""
    if getattr(client, "_connection_delay_in_ms", False):
        return
    manager = client._manager

    def milliseconds(node_id: Any) -> float:
        return manager.connection_delay(node_id) * 1000

    client.connection_delay = milliseconds
    client._connection_delay_in_ms = True
