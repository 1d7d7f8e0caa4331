"""What happens to an input record whose key or value cannot be deserialized.

Configured with ``StreamsConfig.deserialization_exception_handler``:

- ``"log_and_fail"`` (default): the task raises DeserializationError naming
  topic/partition/offset; the instance stops (ERROR) with committed state intact.
- ``"log_and_continue"``: the record is logged, skipped and counted
  (task metric ``dropped-records``).
- ``"dead_letter:<topic>"``: the raw record is produced to ``<topic>`` with the error
  in headers (``__streams.errors.*``, as Kafka Streams' KIP-1034), then skipped.
- any object with ``handle(context, record, exception)`` returning a
  :class:`DeserializationHandlerResponse` or a :class:`DeserializationHandlerResult`.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import traceback
from typing import Any, Protocol

from airflow_stateful_provider.streams.errors import ConfigError

__all__ = [
    "DeadLetterQueueExceptionHandler",
    "DeadLetterRecord",
    "DeserializationExceptionHandler",
    "DeserializationHandlerResponse",
    "DeserializationHandlerResult",
    "ErrorHandlerContext",
    "LogAndContinueExceptionHandler",
    "LogAndFailExceptionHandler",
    "deserialization_handler_from_config",
]

log = logging.getLogger(__name__)

#: Header names of a dead-letter record (the Kafka Streams names).
HEADER_EXCEPTION = "__streams.errors.exception"
HEADER_MESSAGE = "__streams.errors.message"
HEADER_STACKTRACE = "__streams.errors.stacktrace"
HEADER_TOPIC = "__streams.errors.topic"
HEADER_PARTITION = "__streams.errors.partition"
HEADER_OFFSET = "__streams.errors.offset"


class DeserializationHandlerResult(enum.Enum):
    CONTINUE = "continue"
    FAIL = "fail"


@dataclasses.dataclass(frozen=True)
class DeadLetterRecord:
    """A record the task produces to a dead-letter topic (raw bytes, as read)."""

    topic: str
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]


@dataclasses.dataclass(frozen=True)
class DeserializationHandlerResponse:
    result: DeserializationHandlerResult
    dead_letter_records: tuple[DeadLetterRecord, ...] = ()


@dataclasses.dataclass(frozen=True)
class ErrorHandlerContext:
    """Where the poison record was read."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]
    processor_node_id: str
    task_id: Any


class DeserializationExceptionHandler(Protocol):
    def handle(
        self, context: ErrorHandlerContext, record: Any, exception: Exception
    ) -> DeserializationHandlerResponse | DeserializationHandlerResult: ...


def _describe(context: ErrorHandlerContext) -> str:
    return (
        f"task {context.task_id} topic={context.topic} partition={context.partition} "
        f"offset={context.offset}"
    )


class LogAndFailExceptionHandler:
    """Stop processing: the poison record needs a human."""

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> DeserializationHandlerResponse:
        log.error("deserialization failed, stopping (%s): %r", _describe(context), exception)
        return DeserializationHandlerResponse(DeserializationHandlerResult.FAIL)


class LogAndContinueExceptionHandler:
    """Skip the poison record; the task counts it as dropped."""

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> DeserializationHandlerResponse:
        log.warning("deserialization failed, skipping record (%s): %r", _describe(context), exception)
        return DeserializationHandlerResponse(DeserializationHandlerResult.CONTINUE)


class DeadLetterQueueExceptionHandler:
    """Send the raw poison record, with the error in headers, to ``topic``; then skip it."""

    def __init__(self, topic: str) -> None:
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"dead-letter topic must be a non-empty string, got {topic!r}")
        self.topic = topic

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> DeserializationHandlerResponse:
        log.warning(
            "deserialization failed, sending record to dead-letter topic %s (%s): %r",
            self.topic, _describe(context), exception,
        )
        stack = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
        headers = tuple(getattr(record, "headers", None) or ()) + (
            (HEADER_EXCEPTION, f"{type(exception).__module__}.{type(exception).__qualname__}".encode()),
            (HEADER_MESSAGE, str(exception).encode()),
            (HEADER_STACKTRACE, stack.encode()),
            (HEADER_TOPIC, context.topic.encode()),
            (HEADER_PARTITION, str(context.partition).encode()),
            (HEADER_OFFSET, str(context.offset).encode()),
        )
        dead = DeadLetterRecord(self.topic, record.key, record.value, max(record.timestamp, 0), headers)
        return DeserializationHandlerResponse(DeserializationHandlerResult.CONTINUE, (dead,))

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
    if callable(getattr(value, "handle", None)):
        return value
    raise ConfigError(f"unknown deserialization_exception_handler {value!r}")


def normalize_response(response: Any, handler: Any) -> DeserializationHandlerResponse:
    """Accept a bare result from user handlers; refuse anything else with a clear error."""
    if isinstance(response, DeserializationHandlerResponse):
        return response
    if isinstance(response, DeserializationHandlerResult):
        return DeserializationHandlerResponse(response)
    raise ConfigError(
        f"deserialization exception handler {handler!r} returned {response!r}; expected a "
        f"DeserializationHandlerResponse or DeserializationHandlerResult"
    )
