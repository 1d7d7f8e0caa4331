"""The log of a process that runs instances (the runner, the Spark driver and executors): one
line format, Kafka's client at WARNING, and each of its repeated lines held back for a minute.

With a broker down, every client of an instance (the stream thread's consumer, restore
consumer and producer, the admin client, the status publisher, the control listener, the
query responder) logs each failed reconnect and metadata refresh: about 1,500 lines a minute
for one instance with its only broker gone, 20 MB an hour, in which an on-call engineer looks
for the instance's own lines. Here a line of the ``kafka`` loggers goes through once a minute
per logger, level and text; the next one through says how many like it were held back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["LOG_FORMAT", "RepeatedClientLines", "configure_process_logging", "quiet_kafka_client"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"

#: How long a kafka-python line is held back after it went through.
REPEAT_WINDOW_S = 60.0
#: Lines tracked at most; past it, those whose window ended are forgotten.
_TRACKED_LINES = 1024


def _from_kafka_client(name: str) -> bool:
    return name == "kafka" or name.startswith("kafka.")


class RepeatedClientLines(logging.Filter):
    """A handler filter: a kafka-python line goes through, then its repeats (same logger,
    level and text, whichever client thread) are held back for ``window_s``; the first
    repeat after that goes through with the count held back. Other loggers pass untouched."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._through: dict[tuple[str, int, str], tuple[float, int]] = {}  # line -> (went through at, held back)

    def filter(self, record: logging.LogRecord) -> bool:
        if not _from_kafka_client(record.name):
            return True
        text = record.getMessage()
        line = (record.name, record.levelno, text)
        now = self._clock()
        with self._lock:
            last = self._through.get(line)
            if last is not None and now - last[0] < self._window_s:
                self._through[line] = (last[0], last[1] + 1)
                return False
            if len(self._through) >= _TRACKED_LINES:
                self._forget_ended(now)
            self._through[line] = (now, 0)
        if last is not None and last[1]:
            record.msg = f"{text} ({last[1]} more like this in the last {now - last[0]:.0f} s)"
            record.args = None
        return True

    def _forget_ended(self, now: float) -> None:
        for line in [line for line, (at, _) in self._through.items() if now - at >= self._window_s]:
            del self._through[line]


def quiet_kafka_client(handler: logging.Handler) -> None:
    """Kafka's client loggers at WARNING and their repeats held back on ``handler`` (once)."""
    logging.getLogger("kafka").setLevel(logging.WARNING)
    if not any(isinstance(f, RepeatedClientLines) for f in handler.filters):
        handler.addFilter(RepeatedClientLines())


def configure_process_logging(level: str | int) -> None:
    """``logging.basicConfig`` at ``level`` in LOG_FORMAT, the Kafka client quieted on each
    root handler."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        quiet_kafka_client(handler)
