"""What happens to an input record whose key or value cannot be deserialized.

Configured with ``StreamsConfig.deserialization_exception_handler``:

- ``"log_and_fail"`` (default): the task raises DeserializationError naming
  topic/partition/offset; the instance stops (ERROR) with committed state intact.
- ``"log_and_continue"``: the record is logged, skipped and counted
  (task metric ``dropped-records``).
- ``"dead_letter:<topic>"``: the raw record is produced to ``<topic>`` with the error
  in headers (``__streams.errors.*``, as Kafka Streams' KIP-1034), then skipped.
- any object with ``handle(context, record, exception)`` returning a
  :class:`HandlerResponse` or a :class:`HandlerResult` (``error_handling.py``, shared by
  the processing and production exception handlers).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.processing.error_handling import (
    ErrorHandlerContext,
    HandlerResponse,
    HandlerResult,
    dead_letter_record,
)

__all__ = [
    "DeadLetterQueueExceptionHandler",
    "DeserializationExceptionHandler",
    "DeserializationHandlerResponse",
    "DeserializationHandlerResult",
    "LogAndContinueExceptionHandler",
    "LogAndFailExceptionHandler",
    "deserialization_handler_from_config",
]

log = logging.getLogger(__name__)

#: The names this handler had before the processing and production handlers shared them.
DeserializationHandlerResult = HandlerResult
DeserializationHandlerResponse = HandlerResponse


class DeserializationExceptionHandler(Protocol):
    def handle(self, context: ErrorHandlerContext, record: Any,
               exception: Exception) -> HandlerResponse | HandlerResult: ...


class LogAndFailExceptionHandler:
    """Stop processing: the poison record needs a human."""

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> HandlerResponse:
        log.error("deserialization failed, stopping (%s): %r", context.describe(), exception)
        return HandlerResponse(HandlerResult.FAIL)


class LogAndContinueExceptionHandler:
    """Skip the poison record; the task counts it as dropped."""

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> HandlerResponse:
        log.warning("deserialization failed, skipping record (%s): %r", context.describe(), exception)
        return HandlerResponse(HandlerResult.CONTINUE)


class DeadLetterQueueExceptionHandler:
    """Send the raw poison record, with the error in headers, to ``topic``; then skip it."""

    def __init__(self, topic: str) -> None:
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"dead-letter topic must be a non-empty string, got {topic!r}")
        self.topic = topic

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> HandlerResponse:
        log.warning("deserialization failed, sending record to dead-letter topic %s (%s): %r",
                    self.topic, context.describe(), exception)
        dead = dead_letter_record(self.topic, context, record.key, record.value,
                                  tuple(getattr(record, "headers", None) or ()), exception)
        return HandlerResponse(HandlerResult.CONTINUE, (dead,))

    def __repr__(self) -> str:
        return f"DeadLetterQueueExceptionHandler({self.topic!r})"


def deserialization_handler_from_config(value: Any) -> DeserializationExceptionHandler:
    """The handler object for a ``deserialization_exception_handler`` config value."""
    if value == "log_and_fail":
        return LogAndFailExceptionHandler()
    if value == "log_and_continue":
        return LogAndContinueExceptionHandler()
    if isinstance(value, str) and value.startswith("dead_letter:"):
        return DeadLetterQueueExceptionHandler(value[len("dead_letter:"):].strip())
    if callable(getattr(value, "handle", None)):  # a user's handler: any object with handle()
        handler: DeserializationExceptionHandler = value
        return handler
    raise ConfigError(f"unknown deserialization_exception_handler {value!r}")
