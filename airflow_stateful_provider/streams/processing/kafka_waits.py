"""KafkaWaits: what a stream thread is waiting for on Kafka, since when, and for how long it
may keep retrying.

The stream thread's Kafka calls (a transaction's offsets and commit, a producer's start)
say here what they wait for while they wait, so the status publisher (another thread) can
show a thread that is blocked instead of a silent RUNNING; and a call that fails because a
broker cannot answer yet (a coordinator moving, a broker down) reports it here, which
raises TaskTimeoutError once the failures have lasted ``task_timeout_ms`` (Kafka Streams'
``task.timeout.ms``). A success clears both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kafka.errors import KafkaError

from airflow_stateful_provider.streams.errors import TaskTimeoutError
from airflow_stateful_provider.streams.kafka.retrying_admin import brokers_cannot_answer_yet

T = TypeVar("T")

#: The pause between two attempts of a call the brokers could not answer.
RETRY_BACKOFF_SECONDS = 0.5

__all__ = ["KafkaWait", "KafkaWaits"]


@dataclasses.dataclass(frozen=True)
class KafkaWait:
    """One Kafka call a thread waits in: ``call`` (e.g. "commit_transaction"), what it waits
    for (e.g. "the transaction coordinator, broker 2") and since when (wall-clock ms)."""

    call: str
    waiting_for: str
    since_ms: int


class KafkaWaits:
    """See module docstring. Written by one stream thread, read by any."""

    def __init__(self, task_timeout_ms: int, *, clock: Callable[[], float] = time.time,
                 interrupted: threading.Event | None = None) -> None:
        self.task_timeout_ms = task_timeout_ms
        self._clock = clock
        #: Set when the thread is asked to stop: retrying ends, the last error is raised.
        self.interrupted = interrupted or threading.Event()
        self._lock = threading.Lock()
        self._current: KafkaWait | None = None
        #: A wait that spans the thread's loop (see still_waiting), shown when no call waits.
        self._standing: KafkaWait | None = None
        #: When the calls started failing for want of a broker (wall-clock s), and the call.
        self._failing_since: float | None = None

    @property
    def current(self) -> KafkaWait | None:
        """The call the thread waits in now, or None."""
        with self._lock:
            return self._current or self._standing

    def still_waiting(self, call: str, waiting_for: str | None) -> None:
        """A wait across the thread's loop rather than inside one call (its polls finding no
        group coordinator while the brokers are down): shown from the first report, with
        that time, until reported with ``waiting_for`` None. The loop goes on meanwhile, so
        it counts toward no task timeout, as Kafka Streams' poll."""
        if waiting_for is None and self._standing is None:
            return  # the usual case, on every poll: nothing to clear, no lock taken
        with self._lock:
            if waiting_for is None:
                self._standing = None
            elif self._standing is None or self._standing.waiting_for != waiting_for:
                self._standing = KafkaWait(call, waiting_for, int(self._clock() * 1000))

    @property
    def failing_since_ms(self) -> int | None:
        """Since when (wall-clock ms) the thread's Kafka calls keep failing, or None."""
        since = self._failing_since
        return None if since is None else int(since * 1000)

    @contextlib.contextmanager
    def waiting_in(self, call: str, waiting_for: str) -> Iterator[Callable[[str], None]]:
        """While the block runs the thread waits in ``call``; the block may call the yielded
        function to say what it waits for now (a coordinator found, a broker retried)."""
        since = int(self._clock() * 1000)

        def update(detail: str) -> None:
            with self._lock:
                self._current = KafkaWait(call, detail, since)

        update(waiting_for)
        try:
            yield update
        finally:
            with self._lock:
                self._current = None

    def failed(self, call: str, error: BaseException) -> None:
        """``call`` failed because a broker could not answer yet; raises TaskTimeoutError when
        such failures have lasted ``task_timeout_ms``."""
        now = self._clock()
        if self._failing_since is None:
            self._failing_since = now
        elapsed_ms = (now - self._failing_since) * 1000
        if elapsed_ms >= self.task_timeout_ms:
            raise TaskTimeoutError(
                f"{call} kept failing for {elapsed_ms / 1000:.0f} s, past task_timeout_ms={self.task_timeout_ms} "
                f"(the brokers could not answer): {error}", call=call) from error

    def succeeded(self) -> None:
        """A Kafka call completed: the brokers answer again."""
        self._failing_since = None

    def retried(self, call: str, waiting_for: str, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)``, called again after a pause while it fails because a
        broker cannot answer yet (a retriable Kafka error other than a missing topic, which is a
        fact to report), until the task timeout; shown as waiting in ``call`` meanwhile."""
        with self.waiting_in(call, waiting_for):
            while True:
                try:
                    result = function(*args, **kwargs)
                except KafkaError as exc:
                    if not brokers_cannot_answer_yet(exc) or self.interrupted.is_set():
                        raise
                    self.failed(call, exc)
                    self.interrupted.wait(RETRY_BACKOFF_SECONDS)
                    continue
                self.succeeded()
                return result
