"""A failed metadata refresh is retried, never fatal (kafka/failed_metadata_refresh.py), on
kafka-python's own ClusterMetadata and coordinator code paths with the network replaced by a
recorder. No broker."""

from __future__ import annotations

import asyncio

import pytest
from kafka.cluster import ClusterMetadata
from kafka.errors import KafkaConnectionError, UnknownMemberIdError
from kafka.future import Future

from airflow_stateful_provider.streams.kafka.failed_metadata_refresh import (
    restart_refresh_loop_after_failure,
    retry_coordinator_lookup_on_metadata_failure,
)


class RecordingNet:
    """What ClusterMetadata's wake-up notifier and the coordinator's backoff ask of the network."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def call_soon_threadsafe(self, *_args, **_kwargs) -> None:
        return None

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


class RecordingManager:
    """Starts nothing: records each refresh loop the cluster asks to start."""

    def __init__(self) -> None:
        self._net = RecordingNet()
        self.loops: list[Future] = []

    def call_soon(self, _coroutine) -> Future:
        self.loops.append(Future())
        return self.loops[-1]


def test_a_refresh_loop_that_ended_on_a_failure_is_started_again_by_the_next_update_request():
    manager = RecordingManager()
    cluster = ClusterMetadata()
    cluster.attach(manager)
    restart_refresh_loop_after_failure(cluster)
    cluster.request_update()
    cluster.request_update()
    assert len(manager.loops) == 1  # a running loop is not started twice
    manager.loops[0].failure(KafkaConnectionError("111 ECONNREFUSED"))  # the loop ended on a refresh it awaited
    cluster.request_update()
    assert len(manager.loops) == 2
    cluster.close()
    manager.loops[1].success(None)
    cluster.request_update()
    assert len(manager.loops) == 2  # a closed client starts nothing


class Coordinator:
    """kafka-python's coordinator as the wrapper sees it: ``ensure_coordinator_ready_async``
    raising what the look-up raised, ``answers`` in order (an exception or a result)."""

    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.config = {"retry_backoff_ms": 100}
        self._manager = RecordingManager()

    async def ensure_coordinator_ready_async(self, timeout_ms=None):
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


class Consumer:
    def __init__(self, coordinator: Coordinator) -> None:
        self._coordinator = coordinator


def test_a_failed_metadata_update_during_the_coordinator_lookup_is_retried_after_the_backoff():
    coordinator = Coordinator([KafkaConnectionError("111 ECONNREFUSED"), KafkaConnectionError("again"), True])
    retry_coordinator_lookup_on_metadata_failure(Consumer(coordinator))
    assert asyncio.run(coordinator.ensure_coordinator_ready_async(timeout_ms=10_000)) is True
    assert coordinator._manager._net.slept == [0.1, 0.1] and coordinator.answers == []


def test_the_lookup_reports_not_ready_when_its_timeout_ends_and_raises_what_is_not_retriable():
    coordinator = Coordinator([KafkaConnectionError("111 ECONNREFUSED")] * 3)
    retry_coordinator_lookup_on_metadata_failure(Consumer(coordinator))
    assert asyncio.run(coordinator.ensure_coordinator_ready_async(timeout_ms=0)) is False

    fatal = Coordinator([UnknownMemberIdError("fenced")])
    retry_coordinator_lookup_on_metadata_failure(Consumer(fatal))
    assert not UnknownMemberIdError.retriable
    with pytest.raises(UnknownMemberIdError):
        asyncio.run(fatal.ensure_coordinator_ready_async(timeout_ms=10_000))
