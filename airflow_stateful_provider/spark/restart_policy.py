"""When the supervisor restarts a failed instance, and when it gives up.

Backoff doubles from ``initial_backoff_s`` up to ``max_backoff_s`` with each failure that
follows closely on the previous one, and starts over once an instance has run for
``failure_window_s`` without failing. A crash loop is ``max_failures`` failures of one
instance within ``failure_window_s``: the application then stops and reports the last
error, instead of restarting forever with the same error.
"""

from __future__ import annotations

import collections
import dataclasses

__all__ = ["CrashLoopError", "RestartPolicy", "RestartTracker"]


class CrashLoopError(RuntimeError):
    """An instance failed too often within the window; carries the last error text."""


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    max_failures: int = 5
    failure_window_s: float = 600.0

    def __post_init__(self) -> None:
        if self.initial_backoff_s < 0:
            raise ValueError(f"initial_backoff_s must be >= 0, got {self.initial_backoff_s!r}")
        if self.max_backoff_s < self.initial_backoff_s:
            raise ValueError(f"max_backoff_s ({self.max_backoff_s!r}) must be >= initial_backoff_s "
                             f"({self.initial_backoff_s!r})")
        if self.max_failures < 1:
            raise ValueError(f"max_failures must be >= 1, got {self.max_failures!r}")
        if self.failure_window_s <= 0:
            raise ValueError(f"failure_window_s must be > 0, got {self.failure_window_s!r}")


class RestartTracker:
    """The failure history of one instance under a :class:`RestartPolicy`."""

    def __init__(self, instance_id: str, policy: RestartPolicy) -> None:
        self.instance_id = instance_id
        self.policy = policy
        self._failures: collections.deque[float] = collections.deque()
        self._consecutive = 0
        self.total_failures = 0

    def record_failure(self, at_s: float, error: str) -> float:
        """Note a failure at ``at_s`` (monotonic seconds); returns the backoff before the
        restart, or raises CrashLoopError when the policy's bound is reached."""
        window = self.policy.failure_window_s
        if self._failures and at_s - self._failures[-1] > window:
            self._consecutive = 0
        while self._failures and at_s - self._failures[0] > window:
            self._failures.popleft()
        self._failures.append(at_s)
        self._consecutive += 1
        self.total_failures += 1
        if len(self._failures) >= self.policy.max_failures:
            raise CrashLoopError(f"instance {self.instance_id} failed {len(self._failures)} times within "
                                 f"{window:g} s (max_failures={self.policy.max_failures}); last error: {error}")
        return min(self.policy.max_backoff_s, self.policy.initial_backoff_s * 2 ** (self._consecutive - 1))
