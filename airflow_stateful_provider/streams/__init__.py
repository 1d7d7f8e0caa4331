"""The engine's public API: everything a topology is written, run, tested and watched with.

    from airflow_stateful_provider.streams import KafkaStreams, StreamsBuilder, StreamsConfig

Import from this package only. The modules underneath (``streams.dsl``, ``streams.processing``,
``streams.state``, ...) are internal and may move between releases; every name a user needs
is here, and ``__all__`` lists them. The Airflow surface lives in the provider's
``hooks``, ``operators``, ``sensors`` and ``triggers`` subpackages.

Names load on first use (PEP 562): importing an engine module, or this package from a DAG
file, does not pull in the Kafka client, RocksDB and the DSL until a name is touched.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Where each public name lives (module relative to this package). The one list to extend.
_EXPORTS: dict[str, tuple[str, ...]] = {
    ".config": ("AT_LEAST_ONCE", "EXACTLY_ONCE_V2", "ProcessingGuarantee", "StreamsConfig"),
    ".control.channel": ("live_instances", "send_command", "wait_for_command"),
    ".control.commands": ("CommandOutcome", "ControlCommand", "new_command"),
    ".dsl.builder": ("StreamsBuilder",),
    ".dsl.change": ("Change",),
    ".dsl.materialized": ("Materialized",),
    ".dsl.parameters": ("Consumed", "Grouped", "Joined", "Produced"),
    ".dsl.streams": ("KGroupedStream", "KStream", "KTable", "SessionWindowedKStream"),
    ".durations": ("duration_ms",),
    ".errors": (
        "BrokerUnreachableError", "ChangelogLostError", "ConfigError", "ControlFormatError", "CorruptCheckpointError",
        "DeserializationError", "FencedInstanceError", "ForeignStateError", "GroupProtocolError", "IllegalStateError",
        "InvalidRecordError", "InvalidSnapshotError", "InvalidStoreError", "InvalidTimestampError",
        "MissingTopicError", "ProcessingError", "ProductionError", "ReadOnlyStoreError", "SerializationError",
        "SnapshotError",
        "StatusFormatError", "StatusReadTimeoutError", "StreamsError", "TopologyError", "UnknownApplicationError",
        "UnsupportedGroupProtocolVersionError", "UnsupportedStatusVersionError",
        "QueryError", "InvalidQueryError", "UnknownStoreError", "InstanceNotRunningError", "TaskNotAvailableError",
        "QueryTimeoutError", "WrongStoreKindError",
    ),
    ".instance.kafka_streams": ("KafkaStreams", "KafkaStreamsState"),
    ".processing.deserialization": (
        "DeadLetterQueueExceptionHandler", "DeserializationExceptionHandler", "DeserializationHandlerResponse",
        "DeserializationHandlerResult", "LogAndContinueExceptionHandler", "LogAndFailExceptionHandler",
    ),
    ".processing.error_handling": (
        "DeadLetterRecord", "ErrorHandlerContext", "HandlerResponse", "HandlerResult",
        "LogAndContinueProcessingExceptionHandler", "LogAndContinueProductionExceptionHandler",
        "LogAndFailProcessingExceptionHandler", "LogAndFailProductionExceptionHandler", "ProcessingExceptionHandler",
        "ProducedRecord", "ProductionExceptionHandler",
    ),
    ".processing.timestamp_extractors": ("ConsumedRecord", "TimestampExtractor"),
    ".processor": (
        "Cancellable", "Headers", "KeyValue", "Processor", "ProcessorContext", "ProcessorSupplier",
        "PunctuationType", "Punctuator", "Record", "RecordMetadata",
    ),
    ".queries.requests": (
        "KeyQuery", "MultiVersionedKeyQuery", "Position", "PositionBound", "RangeQuery", "SessionQuery",
        "StateQueryRequest", "VersionedKeyQuery",
    ),
    ".queries.lookups": ("lookup_store",),
    ".queries.remote": ("QueryClient", "committed_position", "query_application"),
    ".queries.results": ("KeyQueryMetadata", "QueryResult", "StateQueryResult"),
    ".restoration.changelog_reader": ("StandbyUpdateListener", "StateRestoreListener", "SuspendReason"),
    ".serdes": ("Serde", "Serdes"),
    ".snapshots.catalog": ("SnapshotEntry", "delete_old_snapshots", "list_snapshots"),
    ".snapshots.storage": ("SnapshotStorage",),
    ".state.keyvalue.typed": ("TypedKeyValueStore",),
    ".state.session.typed": ("TypedSessionStore",),
    ".state.store_dir": ("open_store",),
    ".state.versioned.store": ("VersionedRecord",),
    ".state.versioned.typed": ("TypedVersionedKeyValueStore",),
    ".status.application": (
        "ActiveOwner", "ApplicationStatus", "InstanceSummary", "RestorationProgress", "StandbyReplica", "TaskStatus",
        "build_application_status",
    ),
    ".status.conditions": ("ConditionResult", "TaskCheck", "restoration_condition", "standby_lag_condition"),
    ".status.document": ("InstanceStatus", "TaskRestore"),
    ".status.publisher": ("StatusPublisher",),
    ".status.reader": ("fetch_application_status", "read_status_documents"),
    ".status.rendering": ("progress_bar", "render_status_table"),
    ".task_id": ("TaskId",),
    ".testing": ("TestInputTopic", "TestOutputTopic", "TestRecord", "TopologyTestDriver"),
    ".topology.description": ("TopologyDescription",),
    ".topology.nodes": ("TopicNameExtractor",),
    ".topology.store_builders": ("Stores",),
    ".topology.topology": ("Topology",),
    ".windows": ("EmitStrategy", "SessionWindow", "SessionWindowedSerde", "SessionWindows", "Windowed"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
