"""The network client every client of the engine is built with (kafka-python's documented
``kafka_client`` factory hook; ``kafka.net.compat.KafkaNetClient`` is not exported):
kafka-python's own, with its metadata refresh loop restarted when a failed refresh ended it
(failed_metadata_refresh.py), metadata of a topic it does not know yet requested at once and
a pending update not signalled again (metadata_requests.py), a producer's waits for a broker
answered as its sender reads them (connection_delay.py), a selector whose
"not registered" answers cost no system calls (unregistered_sockets.py) and sockets read
256 KiB at a time, a broker's last bytes before its close (socket_reads.py). Before the first
one is built, kafka-python's table of response classes is kept to primary classes
(response_classes.py), so that client threads decoding their first answers at once cannot
break it."""

from __future__ import annotations

import selectors
from typing import Any

from airflow_stateful_provider.streams.kafka.connection_delay import producer_waits_for_connections
from airflow_stateful_provider.streams.kafka.failed_metadata_refresh import restart_refresh_loop_after_failure
from airflow_stateful_provider.streams.kafka.metadata_requests import metadata_requests_paced
from airflow_stateful_provider.streams.kafka.response_classes import install_response_classes_kept
from airflow_stateful_provider.streams.kafka.socket_reads import install_socket_reads
from airflow_stateful_provider.streams.kafka.unregistered_sockets import CheapLookupSelector

__all__ = ["engine_net_client"]


def engine_net_client(*args: Any, **kwargs: Any) -> Any:
    """``KafkaNetClient(*args, **kwargs)`` with the six fixes above; a ``selector`` other than
    the default one, set by the user, is kept. Checked against kafka-python 3.0.12 (the class
    ``kafka.net.compat.KafkaNetClient``, the default of the ``kafka_client`` setting)."""
    from kafka.net.compat import KafkaNetClient

    if kwargs.get("selector", selectors.DefaultSelector) is selectors.DefaultSelector:
        kwargs["selector"] = CheapLookupSelector
    install_socket_reads()
    install_response_classes_kept()
    client = KafkaNetClient(*args, **kwargs)
    restart_refresh_loop_after_failure(client.cluster)
    metadata_requests_paced(client.cluster)
    if kwargs.get("metric_group_prefix") == "producer":  # KafkaProducer builds its client so
        producer_waits_for_connections(client)
    return client
