"""A producer waits for a broker it cannot send to yet (a reconnect backoff, a connection being
set up) instead of polling through the wait.

The producer's sender asks its network client how long a node that is not ready will stay so
(``connection_delay``), in milliseconds, and polls its selector that long. kafka-python
3.0.12's network client answers in seconds (what its connection manager keeps; the 2.x client
answered milliseconds), and answers 0 for a connection being set up: the sender polls a
thousandth of a backoff over and over, and while a connection is set up it spins, a core's
worth, until the setup times out (10 s, then again after the backoff). A frozen broker or a
network partition keeps every producer with a batch for it spinning. Java's client answers
the backoff left, and "until something happens" for a connection being set up. Here: the
backoff left in milliseconds, and the longest backoff for a connection being set up (the
connection's answer or failure ends the sender's poll earlier anyway: it runs on the same
selector). Measured: a producer with a batch for a frozen broker made 27,000 sender passes
a second (a core); for a stopped broker 370 a second (8% of a core).
"""

from __future__ import annotations

from typing import Any

__all__ = ["producer_waits_for_connections"]


def producer_waits_for_connections(client: Any) -> None:
    """Make ``client`` (the ``KafkaNetClient`` of a producer) answer ``connection_delay`` as the
    sender reads it. Only a producer's: a consumer's group coordinator takes a delay above 0
    of a node that is not connected for "in backoff, look for another coordinator", which a
    connection being set up is not. Checked against kafka-python 3.0.12:
    ``KafkaConnectionManager.connection_delay`` returns the seconds left of a node's
    backoff, ``KafkaNetClient.connection_delay`` passes them on, ``Sender._send_producer_data``
    polls for that many milliseconds, a connection being set up is ``initializing`` in the
    manager's ``_conns``."""
    if getattr(client, "_producer_waits_for_connections", False):
        return
    manager = client._manager
    setting_up_ms = manager.config["reconnect_backoff_max_ms"]

    def milliseconds(node_id: Any) -> float:
        backoff_s = manager.connection_delay(node_id)
        if backoff_s > 0:
            return backoff_s * 1000
        connection = manager._conns.get(node_id)
        return setting_up_ms if connection is not None and connection.initializing else 0

    client.connection_delay = milliseconds
    client._producer_waits_for_connections = True
