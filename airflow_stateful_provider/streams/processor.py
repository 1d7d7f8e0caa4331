"""The Processor API: Record, Processor, ProcessorContext, punctuation types.

These are the types a user implements or receives when writing a processor by
hand (``Topology.add_processor``); the DSL is built on them too. The shapes
mirror Kafka Streams' ``org.apache.kafka.streams.processor.api`` so that its
documentation explains ours.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from airflow_stateful_provider.streams.task_id import TaskId

__all__ = [
    "Cancellable",
    "Headers",
    "KeyValue",
    "Processor",
    "ProcessorContext",
    "ProcessorSupplier",
    "PunctuationType",
    "Punctuator",
    "Record",
    "RecordMetadata",
]

K = TypeVar("K")
V = TypeVar("V")

class KeyValue(NamedTuple):
    """A key and a value (what stores return and output topics read)."""

    key: Any
    value: Any


#: Record headers: an ordered tuple of (key, value) pairs; keys may repeat, as in Kafka.
Headers = tuple[tuple[str, bytes | None], ...]


def _as_headers(headers: Any) -> Headers:
    if headers is None:
        return ()
    if isinstance(headers, Mapping):
        headers = headers.items()
    out = []
    for item in headers:
        try:
            key, value = item
        except (TypeError, ValueError):
            raise TypeError(f"header must be a (key, value) pair, got {item!r}") from None
        if not isinstance(key, str):
            raise TypeError(f"header key must be str, got {key!r}")
        if value is not None and not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"header {key!r} value must be bytes or None, got {value!r}")
        out.append((key, None if value is None else bytes(value)))
    return tuple(out)


@dataclasses.dataclass(frozen=True, slots=True)
class Record(Generic[K, V]):
    """A record flowing through the topology: key, value, timestamp (ms) and headers.

    Immutable; derive changed copies with :meth:`with_key` and friends, so a processor
    forwarding a modified record never alters what its siblings receive.
    """

    key: K
    value: V
    timestamp: int
    headers: Headers = ()

    def __post_init__(self) -> None:
        # Hot path (every record, every forward): exact type checks first.
        ts = self.timestamp
        if type(ts) is not int:
            if isinstance(ts, bool) or not isinstance(ts, int):
                raise TypeError(f"Record timestamp must be int milliseconds, got {ts!r}")
        if ts < 0:
            raise ValueError(f"Record timestamp must be >= 0, got {ts}")
        headers = self.headers
        if headers:
            if type(headers) is not tuple or any(type(h) is not tuple for h in headers):
                object.__setattr__(self, "headers", _as_headers(headers))
        elif type(headers) is not tuple:  # None, [] or {}
            object.__setattr__(self, "headers", ())

    def with_key(self, key: Any) -> Record:
        return trusted_record(key, self.value, self.timestamp, self.headers)

    def with_value(self, value: Any) -> Record:
        return trusted_record(self.key, value, self.timestamp, self.headers)

    def with_timestamp(self, timestamp: int) -> Record:
        return Record(self.key, self.value, timestamp, self.headers)

    def with_headers(self, headers: Any) -> Record:
        return Record(self.key, self.value, self.timestamp, _as_headers(headers))


_new_record = object.__new__
_set_key, _set_value, _set_timestamp, _set_headers = (
    Record.__dict__[field].__set__ for field in ("key", "value", "timestamp", "headers"))


def trusted_record(key: Any, value: Any, timestamp: int, headers: Headers) -> Record:
    """A Record from parts known to be valid (``timestamp`` an int >= 0, ``headers`` a tuple
    of pairs), without ``__post_init__``'s checks: the engine's per-record paths build
    records from values it already checked, at well under half the cost."""
    record = _new_record(Record)
    _set_key(record, key)
    _set_value(record, value)
    _set_timestamp(record, timestamp)
    _set_headers(record, headers)
    return record


@dataclasses.dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where the record being processed came from (None during punctuation)."""

    topic: str
    partition: int
    offset: int
    timestamp: int = -1
    headers: Headers = ()


class PunctuationType(enum.Enum):
    """Which clock drives a punctuator (docs/semantics.md §6)."""

    #: Driven by the task's stream time; checked after records are processed.
    STREAM_TIME = "stream_time"
    #: Driven by the wall clock; checked on every loop iteration of the thread.
    WALL_CLOCK_TIME = "wall_clock_time"


#: Called with the time the punctuation fired (stream time or wall-clock time), not its due time.
Punctuator = Callable[[int], None]


@runtime_checkable
class Cancellable(Protocol):
    """Handle returned by ``schedule``: ``cancel()`` stops the schedule, also from inside it."""

    def cancel(self) -> None: ...


class ProcessorContext(abc.ABC):
    """What a processor can see and do: forward, schedule, stores, metadata, commit.

    One context per task; the engine sets the current node and record before calling
    a processor, so the same object answers differently in process() and punctuate().
    """

    @property
    @abc.abstractmethod
    def application_id(self) -> str: ...

    @property
    @abc.abstractmethod
    def task_id(self) -> TaskId: ...

    @property
    @abc.abstractmethod
    def app_configs(self) -> Mapping[str, Any]:
        """``StreamsConfig.app_configs``: user settings for processors."""

    @property
    @abc.abstractmethod
    def record_metadata(self) -> RecordMetadata | None:
        """Topic/partition/offset/timestamp/headers of the input record being processed;
        None in a punctuator or when the record was created by a punctuator."""

    @property
    @abc.abstractmethod
    def current_stream_time_ms(self) -> int:
        """The task's stream time: the largest record timestamp processed so far (-1 unknown)."""

    @property
    @abc.abstractmethod
    def current_system_time_ms(self) -> int:
        """Wall-clock time as the task sees it (mocked by the TopologyTestDriver)."""

    @property
    @abc.abstractmethod
    def metrics(self) -> Any:
        """The task's metrics (counters such as dropped records)."""

    @abc.abstractmethod
    def forward(self, record: Record, child_name: str | None = None) -> None:
        """Send ``record`` to every child of the current node, or only to ``child_name``."""

    @abc.abstractmethod
    def schedule(
        self,
        interval: int | timedelta,
        punctuation_type: PunctuationType,
        punctuator: Punctuator,
    ) -> Cancellable:
        """Call ``punctuator`` every ``interval`` (>= 1 ms) of stream or wall-clock time.

        Refused (IllegalStateError) in a standby task.
        """

    @abc.abstractmethod
    def get_state_store(self, name: str) -> Any:
        """The store ``name``, which must be connected to the current processor."""

    @abc.abstractmethod
    def commit(self) -> None:
        """Request a commit of the task as soon as possible (after the current record)."""


class Processor(abc.ABC, Generic[K, V]):
    """A node of the topology that receives records one at a time.

    Subclass and override :meth:`process`; :meth:`init` receives the context (keep it
    to forward, schedule, reach stores) and :meth:`close` runs when the task closes.
    """

    context: ProcessorContext

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    @abc.abstractmethod
    def process(self, record: Record[K, V]) -> None: ...

    def close(self) -> None:
        """Release resources. Stores are closed by the engine, not here."""


#: Builds a new Processor per task. A topology holds suppliers, never shared instances.
ProcessorSupplier = Callable[[], Processor]
