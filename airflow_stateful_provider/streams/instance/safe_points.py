"""Safe points: actions (control commands) a stream thread runs between two loop iterations.

Another thread queues an action and gets a future; the stream thread runs the queued actions
where its tasks are stable (outside ``poll()`` and its rebalance callbacks, not while the
group rebalances). Once the thread stops, queued and later actions fail: a caller never
waits on an action nobody will run.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from airflow_stateful_provider.streams.errors import StreamsError

__all__ = ["SafePointActions"]

log = logging.getLogger(__name__)


class SafePointActions:
    """The queue of actions of one thread (``name`` appears in errors and the log)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._actions: collections.deque[tuple[Callable[[Any], Any], Future]] = collections.deque()
        self._lock = threading.Lock()
        self._closed = False

    def __bool__(self) -> bool:
        return bool(self._actions)

    def submit(self, action: Callable[[Any], Any]) -> Future:
        """Queue ``action``; its future fails at once if the thread has stopped."""
        future: Future = Future()
        with self._lock:
            if self._closed:
                future.set_exception(StreamsError(f"{self.name} has stopped; the action was not applied"))
            else:
                self._actions.append((action, future))
        return future

    def run(self, argument: Any) -> None:
        """Run every queued action with ``argument`` (the thread), in order; each one's
        result or exception goes to its future, and the next one runs regardless."""
        while self._actions:
            with self._lock:
                action, future = self._actions.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = action(argument)
            except Exception as exc:  # noqa: BLE001 - reported through the future; the thread runs on
                log.warning("%s: control action failed: %r", self.name, exc)
                future.set_exception(exc)
            else:
                future.set_result(result)

    def fail_all(self) -> None:
        """The thread is stopping: fail what is queued and refuse what comes later."""
        with self._lock:
            self._closed = True
            pending = list(self._actions)
            self._actions.clear()
        for _, future in pending:
            if future.set_running_or_notify_cancel():
                future.set_exception(StreamsError(f"{self.name} stopped before it applied the action"))
