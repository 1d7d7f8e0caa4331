"""Exception hierarchy of the streams engine.

Every error the engine raises derives from :class:`StreamsError`, so callers can
catch the engine's failures without catching unrelated bugs. Messages name the
offending value. Keep this module append-only: other modules import these names.
"""

from __future__ import annotations


class StreamsError(Exception):
    """Base class of every error raised by the streams engine."""


class TopologyError(StreamsError, ValueError):
    """A topology is malformed (unknown parent, duplicate name, unconnected store, ...)."""


class ConfigError(StreamsError, ValueError):
    """A configuration value is missing, of the wrong type or out of range."""


class IllegalStateError(StreamsError, RuntimeError):
    """An operation is not allowed in the current state (e.g. schedule() on a standby task)."""


class ProcessingError(StreamsError):
    """A processor raised while processing a record or punctuating; wraps the cause.

    The message names the task, the processor node and, when known, the
    topic/partition/offset of the input record.
    """


class DeserializationError(StreamsError):
    """An input record could not be deserialized and the handler said FAIL.

    The message names topic, partition and offset of the poison record.
    """


class SerializationError(StreamsError, ValueError):
    """A serde could not (de)serialize a value; the message names the serde and the value."""


class InvalidRecordError(StreamsError, ValueError):
    """A key, value, window or timestamp handed to a state store is unacceptable
    (null key, negative timestamp, wrong type); the message names the value."""


class InvalidStoreError(StreamsError):
    """A state store directory cannot be opened as asked: missing or unreadable metadata,
    unknown format version, a store of another type, a closed store."""


class ReadOnlyStoreError(InvalidStoreError):
    """A write or maintenance call was made on a store opened read-only."""


class CorruptCheckpointError(StreamsError):
    """A ``.checkpoint`` file violates the format (docs/semantics.md §1); the message names file and line."""


class StatusFormatError(StreamsError, ValueError):
    """A document of the status topic is malformed; the message names the instance key and
    the field (e.g. ``tasks[0].changelogs[1].end_offset``)."""


class UnsupportedStatusVersionError(StatusFormatError):
    """A status document has a ``format_version`` newer than this reader understands
    (upgrade the reading side)."""


class UnknownApplicationError(StreamsError, LookupError):
    """No status documents for an application: its status topic is missing or holds no
    live document (never started, all instances shut down cleanly, or wrong brokers)."""


class NoRecordedTopologyError(UnknownApplicationError):
    """Nothing recorded in ``<application_id>-topology``: the application never started with a
    provider that records its topology, it was reset, or the brokers are another cluster's."""


class TopologyRecordFormatError(StreamsError, ValueError):
    """A record of ``<application_id>-topology`` this provider cannot read (malformed, or
    written by a newer provider: upgrade the reading side)."""


class BrokerUnreachableError(StreamsError, ConnectionError):
    """The Kafka brokers could not be reached within the bound; names the bootstrap servers tried."""


class StatusReadTimeoutError(StreamsError, TimeoutError):
    """The status topic could not be read to its end offset within the bound."""


class GroupProtocolError(StreamsError, ValueError):
    """Subscription or assignment data of the streams group protocol (``docs/group-protocol.md``)
    is malformed, or a value cannot be encoded; the message names the field (and the byte
    offset when decoding)."""


class UnsupportedGroupProtocolVersionError(GroupProtocolError):
    """Subscription or assignment data has a version newer than this build understands; the
    message names both versions. ``received_version`` and ``latest_supported_version`` carry them
    (the group leader uses them for version probing during a rolling upgrade)."""

    def __init__(self, message: str, *, received_version: int, latest_supported_version: int) -> None:
        super().__init__(message)
        self.received_version = received_version
        self.latest_supported_version = latest_supported_version


class ControlFormatError(StreamsError, ValueError):
    """A command of the control topic (``docs/control-topic.md``) is malformed: bad JSON, an
    unknown command type, a newer ``format_version`` or a field of the wrong type; the
    message names the field and the value."""


class FencedInstanceError(StreamsError):
    """An instance refused to start: the status topic shows a newer epoch for its instance
    id, so a newer incarnation of it exists (the Spark supervisor restarted it). The
    message names the instance id, both epochs and the topic."""


class RollingRestartError(StreamsError, TimeoutError):
    """A rolling restart stopped before its end: an instance's active tasks had no caught-up
    standby elsewhere, or a restarted instance was not back (RUNNING, a higher epoch, its
    tasks restored), within the step's timeout; or it answered the restart ``failed``. The
    message names the instance, what was still missing, and the instances already restarted."""


class AuthorizationError(StreamsError, PermissionError):
    """The brokers refused an operation to this client's principal: an ACL is missing. The
    message names the operation, the resource type (topic, group, transactional id, cluster)
    and its name, as docs/deploying.md ("Least privilege") lists the ACLs."""

    def __init__(self, message: str, *, resource_type: str, resource_names: tuple[str, ...], operation: str) -> None:
        super().__init__(message)
        self.resource_type = resource_type
        self.resource_names = resource_names
        self.operation = operation


class TransactionFailedError(StreamsError):
    """Exactly-once: the stream thread's transaction could not be committed and was aborted,
    so every task of the thread must go back to its last committed state. ``migrated`` is
    True when this member may have lost its tasks (fenced, an older group generation, or no
    longer a member): the rollback is the same, and the thread's next poll rejoins the group,
    which reports the tasks lost if they moved."""

    def __init__(self, message: str, *, migrated: bool = False) -> None:
        super().__init__(message)
        self.migrated = migrated


class TaskTimeoutError(StreamsError, TimeoutError):
    """A stream thread retried what the brokers could not answer (a coordinator, a leader, a
    broker) for longer than ``task_timeout_ms``. The message names the Kafka call, what it
    waited for and the last error; the thread fails (docs/failure-handling.md)."""

    def __init__(self, message: str, *, call: str) -> None:
        super().__init__(message)
        self.call = call


class SnapshotError(StreamsError):
    """A store snapshot could not be taken, listed, read or deleted (docs/snapshots.md)."""


class InvalidSnapshotError(SnapshotError):
    """A snapshot is partial, corrupt, too old for its changelog or does not fit the task: it
    is skipped and the next one (or the changelog) is used."""


class ProductionError(StreamsError):
    """A record could not be written and the production exception handler said FAIL (or
    the record cannot be skipped: a changelog record, an error the broker reported under
    exactly-once); the message names the topic, the task and the cause, ``topic`` the topic.
    A fencing error is raised as TransactionFailedError instead."""

    def __init__(self, message: str, *, topic: str | None = None) -> None:
        super().__init__(message)
        self.topic = topic


class MissingTopicError(StreamsError):
    """A topic the application reads or writes does not exist (never created, or deleted
    while the application runs); ``topics`` names them. The stream thread stops: nothing
    can be committed until they exist again."""

    def __init__(self, message: str, *, topics: list[str]) -> None:
        super().__init__(message)
        self.topics = topics


class InvalidTimestampError(StreamsError):
    """An input record's timestamp is negative (or the extractor could not give one) and the
    timestamp extractor fails on it; the message names topic, partition, offset and value."""


class ForeignStateError(StreamsError):
    """A task directory or a snapshot holds state of another application, of another task, or
    of stores logged to other changelogs than this topology's. It is refused untouched: the
    message names it, what it belongs to, what was expected and how to move it aside."""


class ChangelogLostError(StreamsError):
    """A store's checkpoint names changelog records its changelog no longer holds (deleted,
    recreated or truncated while the application was stopped) and ``on_changelog_loss`` is
    "fail": the task is not started from an empty store. The message names each task, store,
    changelog partition, the checkpointed offset, the changelog's offsets now, and the fix;
    ``lost`` holds one entry per lost changelog partition (restoration/changelog_loss.py)."""

    def __init__(self, message: str, *, lost: tuple = ()) -> None:
        super().__init__(message)
        self.lost = tuple(lost)


class QueryError(StreamsError):
    """An interactive query (docs/interactive-queries.md) could not be answered. The
    subclasses say why; the message names the store, the key or task and the fix."""


class InvalidQueryError(QueryError, ValueError):
    """A query is malformed: a bad limit, bound, continuation token, key of the wrong type
    for the store's serde, or a query type the store's kind does not answer."""


class UnknownStoreError(QueryError, LookupError):
    """The application has no store of that name; the message lists the stores it has."""


class InstanceNotRunningError(QueryError):
    """The instance asked is not running (created, shutting down, stopped or failed)."""


class TaskNotAvailableError(QueryError):
    """No replica could answer for a task: it is restoring (``reason`` "restoring"), held by
    no instance asked (``reason`` "not_owned"), a standby behind the lag bound
    (``reason`` "lagging") or behind the position bound (``reason`` "position")."""

    def __init__(self, message: str, *, reason: str = "not_owned") -> None:
        super().__init__(message)
        self.reason = reason


class QueryTimeoutError(QueryError, TimeoutError):
    """No instance answered a remote query within its timeout: the application may be
    stopped, or every owner of the task busy restoring."""


class WrongStoreKindError(InvalidQueryError):
    """A query type the store's kind does not answer (a KeyQuery on a versioned store, ...);
    ``kind`` names the store's kind, so a caller can ask again with a query that fits."""

    def __init__(self, message: str, *, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind
