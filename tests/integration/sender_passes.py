"""Counts a producer's sender passes against the events that should pace them, for the tests
of a sender that waits instead of spinning (test_metadata_requests.py, test_producer_close.py).
A ratio of counts does not depend on the machine's speed, as a CPU time would."""

from __future__ import annotations

import threading
from typing import Any

from kafka import KafkaProducer


class SenderPasses:
    """Wraps ``producer``'s sender pass and ``owner.<method>`` (an event run on the sender's
    thread, such as an answered metadata refresh or a failed connection attempt) to count both."""

    def __init__(self, producer: KafkaProducer, owner: Any, method: str) -> None:
        self.passes = self.events = 0
        sender = producer._sender
        run_once, event = sender.run_once, getattr(owner, method)

        def counted_pass() -> Any:
            self.passes += 1
            return run_once()

        def counted_event(*args: Any, **kwargs: Any) -> Any:
            self.events += 1
            return event(*args, **kwargs)

        sender.run_once = counted_pass
        setattr(owner, method, counted_event)

    def sample(self, seconds: float) -> tuple[int, int]:
        """(passes, events) over ``seconds``."""
        passes, events = self.passes, self.events
        threading.Event().wait(seconds)
        return self.passes - passes, self.events - events
