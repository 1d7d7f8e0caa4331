"""What happens to a record whose processing or production fails: the handlers' shared words.

Three handlers decide, as in Kafka Streams, whether the stream thread fails or the record
is skipped (counted in the task's ``dropped-records`` metric by reason, shown in status):

- the deserialization exception handler (``deserialization.py``);
- the processing exception handler (KIP-1033): a processor or punctuator raised;
  ``processing_exception_handler`` = ``"log_and_fail"`` (default), ``"log_and_continue"``,
  ``"dead_letter:<topic>"`` (the raw input record goes there, then is skipped) or an object
  with ``handle(context, record, exception)``. CONTINUE skips the rest of that record's path
  below the failed processor; what was forwarded before the exception stays sent;
- the production exception handler: a record could not be serialized or sent (too large for
  the producer's ``max_request_size``, refused by the broker); ``production_exception_handler``
  = ``"log_and_fail"`` (default), ``"log_and_continue"`` or an object with
  ``handle(context, record, exception)``. Fencing, authorization and missing topics never
  reach it: they are not a record's fault.

A handler returns a :class:`HandlerResult` or a :class:`HandlerResponse` (the result, plus
records for a dead-letter topic). Handlers run on the stream thread; one that raises fails
the thread, naming the handler.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from airflow_stateful_provider.streams.errors import ConfigError, ProcessingError

__all__ = [
    "DeadLetterRecord",
    "ErrorHandlerContext",
    "HandlerResponse",
    "HandlerResult",
    "LogAndContinueProcessingExceptionHandler",
    "LogAndContinueProductionExceptionHandler",
    "LogAndFailProcessingExceptionHandler",
    "LogAndFailProductionExceptionHandler",
    "ProcessingDeadLetterHandler",
    "ProcessingExceptionHandler",
    "ProducedRecord",
    "ProductionExceptionHandler",
    "dead_letter_record",
    "normalize_response",
    "processing_handler_from_config",
    "production_handler_from_config",
]

log = logging.getLogger(__name__)

#: Header names of a dead-letter record (the Kafka Streams names, KIP-1034).
HEADER_EXCEPTION = "__streams.errors.exception"
HEADER_MESSAGE = "__streams.errors.message"
HEADER_STACKTRACE = "__streams.errors.stacktrace"
HEADER_TOPIC = "__streams.errors.topic"
HEADER_PARTITION = "__streams.errors.partition"
HEADER_OFFSET = "__streams.errors.offset"


class HandlerResult(enum.Enum):
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
class HandlerResponse:
    result: HandlerResult
    dead_letter_records: tuple[DeadLetterRecord, ...] = ()


@dataclasses.dataclass(frozen=True)
class ErrorHandlerContext:
    """Where the failing record was read: the input record being processed (topic,
    partition, offset; None in a punctuator), the processor node and the task."""

    topic: str | None
    partition: int | None
    offset: int | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]
    processor_node_id: str | None
    task_id: Any
    #: The input record's key and value as read (bytes), for dead-letter records.
    source_raw_key: bytes | None = None
    source_raw_value: bytes | None = None

    def describe(self) -> str:
        where = f"task {self.task_id}"
        if self.processor_node_id is not None:
            where += f" processor {self.processor_node_id!r}"
        if self.topic is not None:
            where += f" topic={self.topic} partition={self.partition} offset={self.offset}"
        return where


@dataclasses.dataclass(frozen=True)
class ProducedRecord:
    """The record a production exception handler is asked about: key and value as bytes,
    or as given when serializing them failed."""

    topic: str
    key: Any
    value: Any
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]
    partition: int | None


class ProcessingExceptionHandler(Protocol):
    def handle(self, context: ErrorHandlerContext, record: Any,
               exception: Exception) -> HandlerResponse | HandlerResult: ...


class ProductionExceptionHandler(Protocol):
    def handle(self, context: ErrorHandlerContext, record: ProducedRecord,
               exception: Exception) -> HandlerResponse | HandlerResult: ...


def dead_letter_record(topic: str, context: ErrorHandlerContext, key: bytes | None, value: bytes | None,
                       headers: tuple[tuple[str, bytes | None], ...], exception: BaseException) -> DeadLetterRecord:
    """The raw input record with the error in its headers, for a dead-letter topic."""
    stack = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    error_headers = (
        (HEADER_EXCEPTION, f"{type(exception).__module__}.{type(exception).__qualname__}".encode()),
        (HEADER_MESSAGE, str(exception).encode()),
        (HEADER_STACKTRACE, stack.encode()),
        (HEADER_TOPIC, (context.topic or "").encode()),
        (HEADER_PARTITION, str(context.partition).encode()),
        (HEADER_OFFSET, str(context.offset).encode()),
    )
    return DeadLetterRecord(topic, key, value, max(context.timestamp, 0), tuple(headers) + error_headers)


class LogAndFailProcessingExceptionHandler:
    """Stop: the record or the processor needs a human (Kafka Streams' default)."""

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> HandlerResult:
        log.error("processing failed, stopping (%s): %r", context.describe(), exception)
        return HandlerResult.FAIL


class LogAndContinueProcessingExceptionHandler:
    """Skip the record below the failed processor; counted as dropped ("processing")."""

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> HandlerResult:
        log.warning("processing failed, skipping the record (%s): %r", context.describe(), exception)
        return HandlerResult.CONTINUE


class ProcessingDeadLetterHandler:
    """Send the raw input record, with the error in headers, to ``topic``; then skip it.
    A punctuator's failure (no input record) fails the thread."""

    def __init__(self, topic: str) -> None:
        self.topic = topic

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> HandlerResponse:
        if context.topic is None:
            log.error("punctuation failed, stopping (%s): %r", context.describe(), exception)
            return HandlerResponse(HandlerResult.FAIL)
        log.warning("processing failed, sending the input record to dead-letter topic %s (%s): %r", self.topic,
                    context.describe(), exception)
        dead = dead_letter_record(self.topic, context, context.source_raw_key, context.source_raw_value,
                                  context.headers, exception)
        return HandlerResponse(HandlerResult.CONTINUE, (dead,))

    def __repr__(self) -> str:
        return f"ProcessingDeadLetterHandler({self.topic!r})"


class LogAndFailProductionExceptionHandler:
    """Stop: the record cannot be written (Kafka Streams' DefaultProductionExceptionHandler)."""

    def handle(self, context: ErrorHandlerContext, record: ProducedRecord, exception: Exception) -> HandlerResult:
        log.error("sending a record to %s failed, stopping (%s): %r", record.topic, context.describe(), exception)
        return HandlerResult.FAIL


class LogAndContinueProductionExceptionHandler:
    """Skip the record that cannot be written; counted as dropped ("production")."""

    def handle(self, context: ErrorHandlerContext, record: ProducedRecord, exception: Exception) -> HandlerResult:
        log.warning("sending a record to %s failed, skipping it (%s): %r", record.topic, context.describe(),
                    exception)
        return HandlerResult.CONTINUE


def processing_handler_from_config(value: Any) -> ProcessingExceptionHandler:
    """The handler object for a ``processing_exception_handler`` config value."""
    if value == "log_and_fail":
        return LogAndFailProcessingExceptionHandler()
    if value == "log_and_continue":
        return LogAndContinueProcessingExceptionHandler()
    if isinstance(value, str) and value.startswith("dead_letter:"):
        return ProcessingDeadLetterHandler(value[len("dead_letter:"):].strip())
    if callable(getattr(value, "handle", None)):  # a user's handler: any object with handle()
        handler: ProcessingExceptionHandler = value
        return handler
    raise ConfigError(f"unknown processing_exception_handler {value!r}")


def production_handler_from_config(value: Any) -> ProductionExceptionHandler:
    """The handler object for a ``production_exception_handler`` config value."""
    if value == "log_and_fail":
        return LogAndFailProductionExceptionHandler()
    if value == "log_and_continue":
        return LogAndContinueProductionExceptionHandler()
    if callable(getattr(value, "handle", None)):  # a user's handler: any object with handle()
        handler: ProductionExceptionHandler = value
        return handler
    raise ConfigError(f"unknown production_exception_handler {value!r}")


def normalize_response(response: Any, handler: Any) -> HandlerResponse:
    """Accept a bare result from user handlers; refuse anything else with a clear error."""
    if isinstance(response, HandlerResponse):
        return response
    if isinstance(response, HandlerResult):
        return HandlerResponse(response)
    raise ConfigError(f"exception handler {handler!r} returned {response!r}; expected a HandlerResponse or "
                      f"HandlerResult")


def ask_processing_handler(handler: ProcessingExceptionHandler, context: ErrorHandlerContext, record: Any,
                           exc: Exception, send_dead_letter: Callable[[DeadLetterRecord], None]) -> bool:
    """Ask ``handler`` about ``exc`` (raised processing ``record``, None in a punctuator) and
    send the dead-letter records it returns. True to continue; a failing handler raises
    ProcessingError naming it."""
    try:
        response = normalize_response(handler.handle(context, record, exc), handler)
    except Exception as handler_exc:
        raise ProcessingError(f"processing exception handler {handler!r} failed ({context.describe()}) while "
                              f"handling {exc!r}: {handler_exc!r}") from handler_exc
    for dead in response.dead_letter_records:
        send_dead_letter(dead)
    return response.result is HandlerResult.CONTINUE
