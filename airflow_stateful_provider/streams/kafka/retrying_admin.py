"""An admin client whose calls are retried while a broker cannot answer them yet.

kafka-python 3.0.12's KafkaAdminClient sends each request to one broker (the least loaded,
or the controller) and raises at once when that broker is down (KafkaConnectionError,
NodeNotReadyError) or not the leader any more, although another broker would answer. On a
replicated cluster that is routine (a rolling restart, a leader election), so the engine's
admin calls go through :class:`RetryingAdmin`: a retriable error is retried after a short
pause until the call's bound, and only then raised, as the error ``on_exhausted`` makes.
Every call is one the engine may repeat safely (descriptions, offsets, topic creation whose
"already exists" the caller accepts, records deletion up to an offset). A topic that does
not exist is not retried: it is a fact the caller reports (instance/topic_watch.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka.errors import KafkaError, UnknownTopicOrPartitionError

__all__ = ["RetryingAdmin", "brokers_cannot_answer_yet"]

log = logging.getLogger(__name__)

#: The pause between two attempts of a call.
RETRY_BACKOFF_SECONDS = 0.5


def brokers_cannot_answer_yet(error: BaseException) -> bool:
    """Whether ``error`` is one to retry: a retriable Kafka error (a coordinator moving, a
    leader election, a broker down, a timeout), except a missing topic, which is a fact."""
    return isinstance(error, KafkaError) and error.retriable and not isinstance(error, UnknownTopicOrPartitionError)


class RetryingAdmin:
    """``admin``'s methods, each retried on retriable errors for at most ``bound_ms``;
    then ``on_exhausted(call, last_error, waited_ms)`` is raised (see module docstring)."""

    def __init__(self, admin: Any, bound_ms: int,
                 on_exhausted: Callable[[str, BaseException, int], BaseException]) -> None:
        self.admin = admin
        self.bound_ms = bound_ms
        self._on_exhausted = on_exhausted

    def close(self) -> None:
        self.admin.close()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.admin, name)
        if not callable(method) or name.startswith("_"):
            return method

        def retried(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            while True:
                try:
                    return method(*args, **kwargs)
                except KafkaError as exc:
                    if not brokers_cannot_answer_yet(exc):
                        raise
                    waited_ms = int((time.monotonic() - started) * 1000)
                    if waited_ms + RETRY_BACKOFF_SECONDS * 1000 > self.bound_ms:
                        raise self._on_exhausted(name, exc, waited_ms) from exc
                    log.info("admin %s failed (%r); retrying", name, exc)
                    time.sleep(RETRY_BACKOFF_SECONDS)

        return retried
