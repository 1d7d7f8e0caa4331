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
from typing import TYPE_CHECKING, Any

#: Where each public name lives (module relative to this package). The one list to extend.
_EXPORTS: dict[str, tuple[str, ...]] = {
    ".config": ("AT_LEAST_ONCE", "EXACTLY_ONCE_V2", "MAX_COMMIT_INTERVAL_MS", "ProcessingGuarantee", "StreamsConfig"),
    ".control.channel": ("live_instances", "send_command", "wait_for_command"),
    ".control.commands": ("CommandOutcome", "ControlCommand", "new_command"),
    ".control.rolling_restart": ("InstanceRestart", "RollingRestartReport", "rolling_restart"),
    ".dsl.builder": ("StreamsBuilder",),
    ".dsl.change": ("Change",),
    ".dsl.materialized": ("Materialized",),
    ".dsl.parameters": ("Consumed", "Grouped", "Joined", "Produced"),
    ".dsl.streams": ("KGroupedStream", "KStream", "KTable", "SessionWindowedKStream"),
    ".durations": ("duration_ms",),
    ".errors": (
        "AuthorizationError", "BrokerUnreachableError", "ChangelogLostError", "ConfigError", "ControlFormatError",
        "CorruptCheckpointError",
        "DeserializationError", "FencedInstanceError", "ForeignStateError", "GroupProtocolError", "IllegalStateError",
        "InvalidRecordError", "InvalidSnapshotError", "InvalidStoreError", "InvalidTimestampError",
        "MissingTopicError", "ProcessingError", "ProductionError", "ReadOnlyStoreError", "RollingRestartError",
        "SerializationError",
        "SnapshotError",
        "StatusFormatError", "StatusReadTimeoutError", "StreamsError", "TopologyError", "UnknownApplicationError",
        "UnsupportedGroupProtocolVersionError", "UnsupportedStatusVersionError",
        "QueryError", "InvalidQueryError", "UnknownStoreError", "InstanceNotRunningError", "TaskNotAvailableError",
        "QueryTimeoutError", "WrongStoreKindError", "NoRecordedTopologyError", "TopologyRecordFormatError",
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
    ".reset.application_reset": ("reset_application",),
    ".reset.plan": ("OffsetChange", "ResetPlan"),
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
# What type checkers read: the same names, imported from their modules (`X as X` marks a re-export).
# _EXPORTS is what runs; tests/unit/test_public_api.py fails if the two disagree.
if TYPE_CHECKING:
    from .config import AT_LEAST_ONCE as AT_LEAST_ONCE
    from .config import EXACTLY_ONCE_V2 as EXACTLY_ONCE_V2
    from .config import MAX_COMMIT_INTERVAL_MS as MAX_COMMIT_INTERVAL_MS
    from .config import ProcessingGuarantee as ProcessingGuarantee
    from .config import StreamsConfig as StreamsConfig
    from .control.channel import live_instances as live_instances
    from .control.channel import send_command as send_command
    from .control.channel import wait_for_command as wait_for_command
    from .control.commands import CommandOutcome as CommandOutcome
    from .control.commands import ControlCommand as ControlCommand
    from .control.commands import new_command as new_command
    from .control.rolling_restart import InstanceRestart as InstanceRestart
    from .control.rolling_restart import RollingRestartReport as RollingRestartReport
    from .control.rolling_restart import rolling_restart as rolling_restart
    from .dsl.builder import StreamsBuilder as StreamsBuilder
    from .dsl.change import Change as Change
    from .dsl.materialized import Materialized as Materialized
    from .dsl.parameters import Consumed as Consumed
    from .dsl.parameters import Grouped as Grouped
    from .dsl.parameters import Joined as Joined
    from .dsl.parameters import Produced as Produced
    from .dsl.streams import KGroupedStream as KGroupedStream
    from .dsl.streams import KStream as KStream
    from .dsl.streams import KTable as KTable
    from .dsl.streams import SessionWindowedKStream as SessionWindowedKStream
    from .durations import duration_ms as duration_ms
    from .errors import AuthorizationError as AuthorizationError
    from .errors import BrokerUnreachableError as BrokerUnreachableError
    from .errors import ChangelogLostError as ChangelogLostError
    from .errors import ConfigError as ConfigError
    from .errors import ControlFormatError as ControlFormatError
    from .errors import CorruptCheckpointError as CorruptCheckpointError
    from .errors import DeserializationError as DeserializationError
    from .errors import FencedInstanceError as FencedInstanceError
    from .errors import ForeignStateError as ForeignStateError
    from .errors import GroupProtocolError as GroupProtocolError
    from .errors import IllegalStateError as IllegalStateError
    from .errors import InstanceNotRunningError as InstanceNotRunningError
    from .errors import InvalidQueryError as InvalidQueryError
    from .errors import InvalidRecordError as InvalidRecordError
    from .errors import InvalidSnapshotError as InvalidSnapshotError
    from .errors import InvalidStoreError as InvalidStoreError
    from .errors import InvalidTimestampError as InvalidTimestampError
    from .errors import MissingTopicError as MissingTopicError
    from .errors import NoRecordedTopologyError as NoRecordedTopologyError
    from .errors import ProcessingError as ProcessingError
    from .errors import ProductionError as ProductionError
    from .errors import QueryError as QueryError
    from .errors import QueryTimeoutError as QueryTimeoutError
    from .errors import ReadOnlyStoreError as ReadOnlyStoreError
    from .errors import RollingRestartError as RollingRestartError
    from .errors import SerializationError as SerializationError
    from .errors import SnapshotError as SnapshotError
    from .errors import StatusFormatError as StatusFormatError
    from .errors import StatusReadTimeoutError as StatusReadTimeoutError
    from .errors import StreamsError as StreamsError
    from .errors import TaskNotAvailableError as TaskNotAvailableError
    from .errors import TopologyError as TopologyError
    from .errors import TopologyRecordFormatError as TopologyRecordFormatError
    from .errors import UnknownApplicationError as UnknownApplicationError
    from .errors import UnknownStoreError as UnknownStoreError
    from .errors import UnsupportedGroupProtocolVersionError as UnsupportedGroupProtocolVersionError
    from .errors import UnsupportedStatusVersionError as UnsupportedStatusVersionError
    from .errors import WrongStoreKindError as WrongStoreKindError
    from .instance.kafka_streams import KafkaStreams as KafkaStreams
    from .instance.kafka_streams import KafkaStreamsState as KafkaStreamsState
    from .processing.deserialization import DeadLetterQueueExceptionHandler as DeadLetterQueueExceptionHandler
    from .processing.deserialization import DeserializationExceptionHandler as DeserializationExceptionHandler
    from .processing.deserialization import DeserializationHandlerResponse as DeserializationHandlerResponse
    from .processing.deserialization import DeserializationHandlerResult as DeserializationHandlerResult
    from .processing.deserialization import LogAndContinueExceptionHandler as LogAndContinueExceptionHandler
    from .processing.deserialization import LogAndFailExceptionHandler as LogAndFailExceptionHandler
    from .processing.error_handling import DeadLetterRecord as DeadLetterRecord
    from .processing.error_handling import ErrorHandlerContext as ErrorHandlerContext
    from .processing.error_handling import HandlerResponse as HandlerResponse
    from .processing.error_handling import HandlerResult as HandlerResult
    from .processing.error_handling import (
        LogAndContinueProcessingExceptionHandler as LogAndContinueProcessingExceptionHandler,
    )
    from .processing.error_handling import (
        LogAndContinueProductionExceptionHandler as LogAndContinueProductionExceptionHandler,
    )
    from .processing.error_handling import LogAndFailProcessingExceptionHandler as LogAndFailProcessingExceptionHandler
    from .processing.error_handling import LogAndFailProductionExceptionHandler as LogAndFailProductionExceptionHandler
    from .processing.error_handling import ProcessingExceptionHandler as ProcessingExceptionHandler
    from .processing.error_handling import ProducedRecord as ProducedRecord
    from .processing.error_handling import ProductionExceptionHandler as ProductionExceptionHandler
    from .processing.timestamp_extractors import ConsumedRecord as ConsumedRecord
    from .processing.timestamp_extractors import TimestampExtractor as TimestampExtractor
    from .processor import Cancellable as Cancellable
    from .processor import Headers as Headers
    from .processor import KeyValue as KeyValue
    from .processor import Processor as Processor
    from .processor import ProcessorContext as ProcessorContext
    from .processor import ProcessorSupplier as ProcessorSupplier
    from .processor import PunctuationType as PunctuationType
    from .processor import Punctuator as Punctuator
    from .processor import Record as Record
    from .processor import RecordMetadata as RecordMetadata
    from .queries.lookups import lookup_store as lookup_store
    from .queries.remote import QueryClient as QueryClient
    from .queries.remote import committed_position as committed_position
    from .queries.remote import query_application as query_application
    from .queries.requests import KeyQuery as KeyQuery
    from .queries.requests import MultiVersionedKeyQuery as MultiVersionedKeyQuery
    from .queries.requests import Position as Position
    from .queries.requests import PositionBound as PositionBound
    from .queries.requests import RangeQuery as RangeQuery
    from .queries.requests import SessionQuery as SessionQuery
    from .queries.requests import StateQueryRequest as StateQueryRequest
    from .queries.requests import VersionedKeyQuery as VersionedKeyQuery
    from .queries.results import KeyQueryMetadata as KeyQueryMetadata
    from .queries.results import QueryResult as QueryResult
    from .queries.results import StateQueryResult as StateQueryResult
    from .reset.application_reset import reset_application as reset_application
    from .reset.plan import OffsetChange as OffsetChange
    from .reset.plan import ResetPlan as ResetPlan
    from .restoration.changelog_reader import StandbyUpdateListener as StandbyUpdateListener
    from .restoration.changelog_reader import StateRestoreListener as StateRestoreListener
    from .restoration.changelog_reader import SuspendReason as SuspendReason
    from .serdes import Serde as Serde
    from .serdes import Serdes as Serdes
    from .snapshots.catalog import SnapshotEntry as SnapshotEntry
    from .snapshots.catalog import delete_old_snapshots as delete_old_snapshots
    from .snapshots.catalog import list_snapshots as list_snapshots
    from .snapshots.storage import SnapshotStorage as SnapshotStorage
    from .state.keyvalue.typed import TypedKeyValueStore as TypedKeyValueStore
    from .state.session.typed import TypedSessionStore as TypedSessionStore
    from .state.store_dir import open_store as open_store
    from .state.versioned.store import VersionedRecord as VersionedRecord
    from .state.versioned.typed import TypedVersionedKeyValueStore as TypedVersionedKeyValueStore
    from .status.application import ActiveOwner as ActiveOwner
    from .status.application import ApplicationStatus as ApplicationStatus
    from .status.application import InstanceSummary as InstanceSummary
    from .status.application import RestorationProgress as RestorationProgress
    from .status.application import StandbyReplica as StandbyReplica
    from .status.application import TaskStatus as TaskStatus
    from .status.application import build_application_status as build_application_status
    from .status.conditions import ConditionResult as ConditionResult
    from .status.conditions import TaskCheck as TaskCheck
    from .status.conditions import restoration_condition as restoration_condition
    from .status.conditions import standby_lag_condition as standby_lag_condition
    from .status.document import InstanceStatus as InstanceStatus
    from .status.document import TaskRestore as TaskRestore
    from .status.publisher import StatusPublisher as StatusPublisher
    from .status.reader import fetch_application_status as fetch_application_status
    from .status.reader import read_status_documents as read_status_documents
    from .status.rendering import progress_bar as progress_bar
    from .status.rendering import render_status_table as render_status_table
    from .task_id import TaskId as TaskId
    from .testing import TestInputTopic as TestInputTopic
    from .testing import TestOutputTopic as TestOutputTopic
    from .testing import TestRecord as TestRecord
    from .testing import TopologyTestDriver as TopologyTestDriver
    from .topology.description import TopologyDescription as TopologyDescription
    from .topology.nodes import TopicNameExtractor as TopicNameExtractor
    from .topology.store_builders import Stores as Stores
    from .topology.topology import Topology as Topology
    from .windows import EmitStrategy as EmitStrategy
    from .windows import SessionWindow as SessionWindow
    from .windows import SessionWindowedSerde as SessionWindowedSerde
    from .windows import SessionWindows as SessionWindows
    from .windows import Windowed as Windowed

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
