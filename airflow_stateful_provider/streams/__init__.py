"""The engine's public API: everything a topology is written, run, tested and watched with.

    from airflow_stateful_provider.streams import KafkaStreams, StreamsBuilder, StreamsConfig

Import from this package only. The modules underneath (``streams.dsl``, ``streams.runtime``,
``streams.state``, ...) are internal and may move between releases; every name a user needs
is here, and ``__all__`` lists them. The Airflow surface lives in the provider's
``hooks``, ``operators``, ``sensors`` and ``triggers`` subpackages.
"""

from __future__ import annotations

from airflow_stateful_provider.streams.config import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE_V2,
    ProcessingGuarantee,
    StreamsConfig,
    duration_ms,
)
from airflow_stateful_provider.streams.control import CommandOutcome, ControlCommand, new_command
from airflow_stateful_provider.streams.dsl import (
    Change,
    Consumed,
    Grouped,
    Joined,
    KGroupedStream,
    KStream,
    KTable,
    Materialized,
    Produced,
    SessionWindowedKStream,
    StreamsBuilder,
)
from airflow_stateful_provider.streams.errors import (
    BrokerUnreachableError,
    ConfigError,
    ControlFormatError,
    CorruptCheckpointError,
    DeserializationError,
    FencedInstanceError,
    GroupProtocolError,
    IllegalStateError,
    InvalidRecordError,
    InvalidStoreError,
    ProcessingError,
    ReadOnlyStoreError,
    SerializationError,
    StatusFormatError,
    StatusReadTimeoutError,
    StreamsError,
    TopologyError,
    UnknownApplicationError,
    UnsupportedGroupProtocolVersionError,
    UnsupportedStatusVersionError,
)
from airflow_stateful_provider.streams.processor import (
    Cancellable,
    Headers,
    KeyValue,
    Processor,
    ProcessorContext,
    ProcessorSupplier,
    PunctuationType,
    Punctuator,
    Record,
    RecordMetadata,
)
from airflow_stateful_provider.streams.runtime.changelog_reader import (
    StandbyUpdateListener,
    StateRestoreListener,
    SuspendReason,
)
from airflow_stateful_provider.streams.runtime.control_channel import live_instances, send_command, wait_for_command
from airflow_stateful_provider.streams.runtime.deserialization import (
    DeadLetterQueueExceptionHandler,
    DeserializationExceptionHandler,
    DeserializationHandlerResponse,
    LogAndContinueExceptionHandler,
    LogAndFailExceptionHandler,
)
from airflow_stateful_provider.streams.runtime.kafka_streams import KafkaStreams, KafkaStreamsState
from airflow_stateful_provider.streams.runtime.status_publisher import (
    StatusPublisher,
    fetch_application_status,
    read_status_documents,
)
from airflow_stateful_provider.streams.runtime.store_builders import Stores
from airflow_stateful_provider.streams.runtime.typed_stores import (
    TypedKeyValueStore,
    TypedSessionStore,
    TypedVersionedKeyValueStore,
    VersionedRecord,
)
from airflow_stateful_provider.streams.serdes import Serde, Serdes
from airflow_stateful_provider.streams.state import open_store
from airflow_stateful_provider.streams.status import (
    ActiveOwner,
    ApplicationStatus,
    InstanceStatus,
    InstanceSummary,
    RestorationProgress,
    StandbyReplica,
    TaskStatus,
    build_application_status,
    progress_bar,
    render_status_table,
)
from airflow_stateful_provider.streams.testing import TestInputTopic, TestOutputTopic, TestRecord, TopologyTestDriver
from airflow_stateful_provider.streams.topology import TaskId, Topology, TopologyDescription, TopicNameExtractor
from airflow_stateful_provider.streams.windows import (
    EmitStrategy,
    SessionWindow,
    SessionWindowedSerde,
    SessionWindows,
    Windowed,
)

__all__ = [
    # building a topology
    "StreamsBuilder", "KStream", "KTable", "KGroupedStream", "SessionWindowedKStream", "Change",
    "Consumed", "Produced", "Grouped", "Joined", "Materialized", "Stores",
    "SessionWindows", "SessionWindow", "Windowed", "SessionWindowedSerde", "EmitStrategy",
    "Topology", "TopologyDescription", "TopicNameExtractor", "TaskId",
    "Processor", "ProcessorSupplier", "ProcessorContext", "Record", "RecordMetadata", "Headers", "KeyValue",
    "PunctuationType", "Punctuator", "Cancellable",
    "TypedKeyValueStore", "TypedSessionStore", "TypedVersionedKeyValueStore", "VersionedRecord",
    "Serde", "Serdes",
    # running it
    "StreamsConfig", "ProcessingGuarantee", "AT_LEAST_ONCE", "EXACTLY_ONCE_V2", "duration_ms",
    "KafkaStreams", "KafkaStreamsState", "StateRestoreListener", "StandbyUpdateListener", "SuspendReason",
    "DeserializationExceptionHandler", "DeserializationHandlerResponse", "LogAndFailExceptionHandler",
    "LogAndContinueExceptionHandler", "DeadLetterQueueExceptionHandler",
    # testing it
    "TopologyTestDriver", "TestInputTopic", "TestOutputTopic", "TestRecord",
    # watching and steering it
    "fetch_application_status", "read_status_documents", "build_application_status", "render_status_table",
    "progress_bar",
    "ApplicationStatus", "TaskStatus", "RestorationProgress", "ActiveOwner", "StandbyReplica", "InstanceSummary",
    "InstanceStatus", "StatusPublisher",
    "new_command", "ControlCommand", "CommandOutcome", "send_command", "wait_for_command", "live_instances",
    "open_store",
    # errors
    "StreamsError", "ConfigError", "TopologyError", "IllegalStateError", "ProcessingError", "DeserializationError",
    "SerializationError", "InvalidRecordError", "InvalidStoreError", "ReadOnlyStoreError", "CorruptCheckpointError",
    "StatusFormatError", "UnsupportedStatusVersionError", "UnknownApplicationError", "BrokerUnreachableError",
    "StatusReadTimeoutError", "GroupProtocolError", "UnsupportedGroupProtocolVersionError", "ControlFormatError",
    "FencedInstanceError",
]
