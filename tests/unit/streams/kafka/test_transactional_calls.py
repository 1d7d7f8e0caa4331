"""The sender's view of a coordinator that cannot be connected to (kafka/transactional_calls.py)."""

from __future__ import annotations

import types

import pytest
from kafka.errors import KafkaConnectionError

from airflow_stateful_provider.streams.kafka.transactional_calls import keep_requests_of_unreachable_coordinators


class NetClient:
    """kafka-python 3.0.12's KafkaNetClient.await_ready: raises when the node is not ready."""

    def __init__(self, ready: set[int]) -> None:
        self.ready = ready
        self.asked: list[tuple[int, int]] = []

    def await_ready(self, node_id: int, timeout_ms: int = 30_000) -> bool:
        self.asked.append((node_id, timeout_ms))
        if node_id not in self.ready:
            raise KafkaConnectionError(f"Node {node_id} not ready after {timeout_ms} ms")
        return True


def producer_with(client: NetClient) -> types.SimpleNamespace:
    return types.SimpleNamespace(_sender=types.SimpleNamespace(_client=client))


def test_an_unreachable_coordinator_is_not_ready_instead_of_an_error_the_sender_drops_the_request_on():
    client = NetClient(ready={1})
    keep_requests_of_unreachable_coordinators(producer_with(client))
    assert client.await_ready(2, timeout_ms=50) is False
    assert client.await_ready(1) is True
    assert client.asked == [(2, 50), (1, 30_000)]


def test_installed_once_and_other_errors_still_raise():
    client = NetClient(ready=set())
    producer = producer_with(client)
    keep_requests_of_unreachable_coordinators(producer)
    keep_requests_of_unreachable_coordinators(producer)
    assert client.await_ready(3) is False
    assert len(client.asked) == 1  # one wrapper, not two

    def broken(node_id: int, timeout_ms: int = 30_000) -> bool:
        raise ValueError("not a connection problem")

    other = types.SimpleNamespace(await_ready=broken)
    keep_requests_of_unreachable_coordinators(producer_with(other))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        other.await_ready(1)


def test_a_producer_without_a_sender_is_left_alone():
    keep_requests_of_unreachable_coordinators(types.SimpleNamespace())


def test_a_transactional_producer_retries_its_requests_after_20_ms_not_its_retry_backoff():
    from kafka import KafkaProducer

    from airflow_stateful_provider.streams.kafka.transactional_calls import (
        TRANSACTIONAL_RETRY_BACKOFF_MS,
        retry_transactional_requests_sooner,
    )

    # kafka-python 3.0.12's sender: its own copy of the producer's settings
    transactional = types.SimpleNamespace(_sender=types.SimpleNamespace(
        config={"retry_backoff_ms": 100, "transaction_manager": object()}))
    retry_transactional_requests_sooner(transactional)
    assert transactional._sender.config["retry_backoff_ms"] == TRANSACTIONAL_RETRY_BACKOFF_MS == 20

    idempotent_only = types.SimpleNamespace(_sender=types.SimpleNamespace(
        config={"retry_backoff_ms": 100, "transaction_manager": None}))
    retry_transactional_requests_sooner(idempotent_only)
    assert idempotent_only._sender.config["retry_backoff_ms"] == 100
    assert KafkaProducer.DEFAULT_CONFIG["retry_backoff_ms"] == 100  # what kafka-python would wait
