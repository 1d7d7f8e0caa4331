"""StreamsConfig: the typed, validated configuration of a streams application.

Why a dataclass and not a dict: every value is checked once, at construction,
with an error naming the offending key and value, so a typo in a DAG's config
fails at submission instead of deep inside a running instance. Field names are
the Kafka Streams config names in snake_case (``commit.interval.ms`` ->
``commit_interval_ms``) so its documentation applies.

Durations accept ``int`` milliseconds or :class:`datetime.timedelta`
(see :func:`duration_ms`).
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.assignment.assignment_configs import AssignmentConfigs
from airflow_stateful_provider.streams.assignment.subscription_info import check_endpoint
from airflow_stateful_provider.streams.durations import duration_ms
from airflow_stateful_provider.streams.errors import ConfigError, GroupProtocolError
from airflow_stateful_provider.streams.kafka.client_settings import (
    ADMIN,
    CLIENT_KINDS,
    CONSUMER,
    PRODUCER,
    check_client_settings,
    check_consumer_timeouts,
    check_engine_settings,
    settings_for,
)
from airflow_stateful_provider.streams.serdes import check_serde
from airflow_stateful_provider.streams.state.common.rocksdb_memory import (
    DEFAULT_ROCKSDB_MEMORY_BYTES,
    DEFAULT_ROCKSDB_WRITE_BUFFER_BYTES,
    check_rocksdb_settings,
)
from airflow_stateful_provider.streams.topic_names import MAX_TOPIC_NAME_LENGTH, topic_name_problem

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE_V2",
    "MAX_COMMIT_INTERVAL_MS",
    "ProcessingGuarantee",
    "StreamsConfig",
]

_APPLICATION_ID_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
#: The longest suffix of the topics every application has (``<application_id>-query-answers``;
#: queries/wire.py names it, status/document.py the status and control topics).
_LONGEST_TOPIC_SUFFIX = "-query-answers"


class ProcessingGuarantee(str, enum.Enum):  # noqa: UP042 - StrEnum would change str() of a member
    """``processing.guarantee``: at-least-once (default) or exactly-once (transactions)."""

    AT_LEAST_ONCE = "at_least_once"
    EXACTLY_ONCE_V2 = "exactly_once_v2"


AT_LEAST_ONCE = ProcessingGuarantee.AT_LEAST_ONCE
EXACTLY_ONCE_V2 = ProcessingGuarantee.EXACTLY_ONCE_V2

#: Names accepted for ``deserialization_exception_handler`` (besides a handler object or
#: ``"dead_letter:<topic>"``).
DESERIALIZATION_HANDLER_NAMES = ("log_and_fail", "log_and_continue")

#: Names accepted for ``processing_exception_handler`` (besides an object or "dead_letter:<topic>").
PROCESSING_HANDLER_NAMES = ("log_and_fail", "log_and_continue")
#: Names accepted for ``production_exception_handler`` (besides a handler object).
PRODUCTION_HANDLER_NAMES = ("log_and_fail", "log_and_continue")
#: Names accepted for ``default_timestamp_extractor`` (besides an extractor object).
TIMESTAMP_EXTRACTOR_NAMES = ("fail_on_invalid_timestamp", "log_and_skip_on_invalid_timestamp",
                             "use_partition_time_on_invalid_timestamp", "wallclock")

#: Names accepted for ``default_dsl_store`` (the store implementation DSL operators use).
DSL_STORE_TYPES = ("rocksdb", "in_memory")

#: Values of ``on_changelog_loss`` (what a task does when its changelog lost what its
#: checkpoint says the stores hold; docs/runbook.md).
CHANGELOG_LOSS_RESPONSES = ("fail", "restore_from_changelog")


#: The longest ``commit_interval_ms`` accepted: 24 hours. Past it an instance in practice never
#: commits (a crash replays everything since the last commit, restarts restore from far back,
#: the group's offsets can expire), and a typo such as 10**30 is no setting anyone means.
MAX_COMMIT_INTERVAL_MS = 24 * 3600 * 1000


def _default_state_dir() -> str:
    # Kafka Streams: ${java.io.tmpdir}/kafka-streams
    return os.path.join(tempfile.gettempdir(), "kafka-streams")


@dataclasses.dataclass(frozen=True)
class StreamsConfig:
    """Configuration of one streams application (all instances share it).

    Required: ``application_id`` (also the consumer group id and the prefix of every
    internal topic) and ``bootstrap_servers``. Everything else has the Kafka Streams
    default. Unknown keys are an error (ConfigError naming the closest known key).
    """

    application_id: str
    bootstrap_servers: str | list[str] | tuple[str, ...]
    #: Root of the task state directories: ``<state_dir>/<application_id>/<task_id>/``.
    state_dir: str = dataclasses.field(default_factory=_default_state_dir)
    num_stream_threads: int = 1
    #: How often a thread commits its tasks. Default 30 s, or 100 ms with exactly-once.
    commit_interval_ms: int | timedelta | None = None
    processing_guarantee: ProcessingGuarantee | str = ProcessingGuarantee.AT_LEAST_ONCE
    #: Default serdes: a serde object or one of "bytes", "string", "int64", "json".
    default_key_serde: Any = "bytes"
    default_value_serde: Any = "bytes"
    #: "log_and_fail" (default), "log_and_continue", "dead_letter:<topic>" or a handler object
    #: with ``handle(context, record, exception)`` (see streams/processing/deserialization.py).
    deserialization_exception_handler: Any = "log_and_fail"
    #: A processor or punctuator raised (KIP-1033): "log_and_fail" (default),
    #: "log_and_continue", "dead_letter:<topic>" or a handler object (processing/error_handling.py).
    processing_exception_handler: Any = "log_and_fail"
    #: A record could not be serialized or written (too large, refused by the broker):
    #: "log_and_fail" (default), "log_and_continue" or a handler object.
    production_exception_handler: Any = "log_and_fail"
    #: The timestamp records are processed at: "fail_on_invalid_timestamp" (default),
    #: "log_and_skip_on_invalid_timestamp", "use_partition_time_on_invalid_timestamp",
    #: "wallclock" or an object with ``extract(record, partition_time)``
    #: (processing/timestamp_extractors.py).
    default_timestamp_extractor: Any = "fail_on_invalid_timestamp"
    #: Store implementation used by DSL operators unless Materialized says otherwise.
    default_dsl_store: str = "rocksdb"
    #: Replication factor of internal topics; -1 = broker default.
    replication_factor: int = -1
    #: How long a task waits for data on all its partitions before processing out of
    #: timestamp order (0 = only wait while the consumer knows more data is available;
    #: -1 = never wait).
    max_task_idle_ms: int | timedelta = 0
    #: How long a stream thread keeps retrying what a broker cannot answer yet (a coordinator
    #: moving, a broker down, a leader election, not enough replicas) before it fails with an
    #: error naming what it waited for (Kafka Streams' ``task.timeout.ms``). Each Kafka call
    #: also has its own bound (docs/failure-handling.md, "Bounded waits").
    task_timeout_ms: int | timedelta = 300_000
    #: Records buffered per partition before the consumer pauses it.
    buffered_records_per_partition: int = 1000
    #: Minimum wall-clock time between two emit-on-window-close range scans of a windowed
    #: aggregation (Kafka Streams' internal ``emit.interval.ms.kstreams.windowed.aggregation``).
    windowed_aggregation_emit_interval_ms: int | timedelta = 1000
    #: Bytes of record cache per stream thread for each cached store (Kafka Streams'
    #: ``statestore.cache.max.bytes``, default 10 MiB); 0 disables caching. See
    #: state/session/caching.py: updates of a key collapse until the next commit.
    statestore_cache_max_bytes: int = 10 * 1024 * 1024
    #: Exactly-once: bytes of store writes an instance buffers in memory until its
    #: transaction commits (Kafka's KIP-892 ``statestore.uncommitted.max.bytes``, split
    #: over the stream threads); past it the thread commits early. See docs/exactly-once.md.
    statestore_uncommitted_max_bytes: int = 64 * 1024 * 1024
    #: RocksDB memory of the whole instance, shared by all its stores: one block cache that
    #: also holds the index and filter blocks and is charged for the memtables (Kafka
    #: Streams' BoundedMemoryRocksDBConfig). See state/common/rocksdb_memory.py.
    rocksdb_memory_bytes: int = DEFAULT_ROCKSDB_MEMORY_BYTES
    #: The memtables' share of ``rocksdb_memory_bytes``: past it the largest one is flushed.
    rocksdb_write_buffer_bytes: int = DEFAULT_ROCKSDB_WRITE_BUFFER_BYTES
    #: Kafka Streams' ``rocksdb.config.setter``: a callable ``(store_name, options)`` (a
    #: ``rocksdict.Options``) or its import path ``"package.module:function"``, called for each
    #: store after the engine set its options, before the store opens.
    rocksdb_config_setter: Any = None
    #: Exactly-once: keep store writes in that buffer until the transaction commits, so a
    #: crash leaves the stores at the last commit and only the changelog tail is restored.
    #: False is Kafka Streams' own behaviour: stores are written at once, and after a crash
    #: a task's stores are wiped and restored from the whole changelog.
    transactional_state_stores: bool = True
    #: A store's changelog no longer holds what its checkpoint says the store holds (deleted,
    #: recreated or truncated while the application was stopped): "fail" (default) stops the
    #: stream thread with ChangelogLostError and leaves the task directory as it is;
    #: "restore_from_changelog" wipes the store and rebuilds it from what the changelog holds
    #: now (Kafka Streams' behaviour). See docs/runbook.md, "A task's state is lost".
    on_changelog_loss: str = "fail"
    #: Store snapshots on shared storage (docs/snapshots.md): a URL fsspec opens
    #: (``file:///mnt/shared/snapshots``, ``s3://bucket/prefix``, ...); None turns them off.
    snapshot_url: str | None = None
    #: fsspec storage options for ``snapshot_url`` (credentials, endpoint). Never logged or
    #: published; on Spark the submit operator passes them outside the command line.
    snapshot_storage_options: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    #: A task's snapshot is due this long after its last one (0: only by commits).
    snapshot_interval_ms: int | timedelta = 600_000
    #: ... or after this many commits of the task (0: only by time).
    snapshot_interval_commits: int = 0
    #: Snapshots kept per task (the newest ones); older ones are deleted after each upload.
    snapshot_retention_count: int = 3
    #: High availability (docs/semantics.md §3): hot standby copies of each stateful task.
    num_standby_replicas: int = 0
    #: A client at most this many changelog records behind on a task is caught up.
    acceptable_recovery_lag: int = 10_000
    #: Extra standbys (warmups) one assignment may create to move tasks without downtime.
    max_warmup_replicas: int = 2
    #: Delay of the rebalance that checks whether warmups caught up (>= 60 s).
    probing_rebalance_interval_ms: int | timedelta = 600_000
    #: Client tag keys standbys should spread over (e.g. ``("zone",)``).
    rack_aware_assignment_tags: tuple[str, ...] | list[str] = ()
    #: This instance's tags (``client_tag.<key>=<value>`` in Kafka Streams).
    client_tags: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Static membership: with an id, a restart within the session timeout keeps the
    #: instance's tasks without a rebalance. Threads use ``<id>-<thread index>``.
    group_instance_id: str | None = None
    #: ``host:port`` this instance can be reached at (shared with the group), or "".
    application_server: str = ""
    #: Identity of this instance in the status topic; default ``<hostname>-<pid>``. The
    #: Spark supervisor sets it to ``<application_id>-<i>`` so a restarted instance keeps it.
    instance_id: str | None = None
    #: Raised by the supervisor on every restart of the instance (status documents carry
    #: it, so readers can tell a restarted instance from a zombie; an instance refuses to
    #: start when the status topic shows a newer epoch for its id). See docs/spark.md.
    instance_epoch: int = 0
    #: How often the instance publishes its status document (also on every state change).
    status_interval_ms: int | timedelta = 10_000
    #: What hosts the instance, published in its status document: ``{"kind": ...,
    #: "application_id": ..., "ui_url": ... or None}``. The Spark supervisor sets it to its
    #: Spark application (id and web UI); None: nothing to say.
    host_application: Mapping[str, Any] | None = None
    #: Serve this instance's metrics in OpenMetrics text at ``http://<host>:<port>/metrics``
    #: (0: any free port, published in the status document); None: no endpoint. The Airflow
    #: API server serves every application's metrics without it (docs/runbook.md).
    metrics_port: int | None = None
    #: How often consumed records of repartition topics are deleted (they are kept
    #: forever otherwise; this application is their only reader).
    repartition_purge_interval_ms: int | timedelta = 30_000
    #: Extra application-specific settings handed to processors via ``context.app_configs``.
    app_configs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: kafka-python settings for every client the instance creates (security, timeouts),
    #: e.g. ``{"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", ...}``.
    client_configs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: kafka-python settings for the consumers only (Kafka Streams' ``consumer.`` prefix),
    #: e.g. ``{"session_timeout_ms": 10000}``.
    consumer_configs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: kafka-python settings for the producers only (``producer.`` prefix).
    producer_configs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: kafka-python settings for the admin client only (``admin.`` prefix).
    admin_configs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen dataclass: normalise in place
        _check_application_id(self.application_id)
        set_(self, "bootstrap_servers", parse_bootstrap_servers(self.bootstrap_servers))
        if not isinstance(self.state_dir, (str, os.PathLike)) or not str(self.state_dir):
            raise ConfigError(f"state_dir must be a path, got {self.state_dir!r}")
        set_(self, "state_dir", os.fspath(self.state_dir))
        _check_int(self.num_stream_threads, "num_stream_threads", minimum=1)
        try:
            guarantee = ProcessingGuarantee(self.processing_guarantee)
        except ValueError:
            raise ConfigError(
                f"processing_guarantee must be one of "
                f"{[g.value for g in ProcessingGuarantee]}, got {self.processing_guarantee!r}"
            ) from None
        set_(self, "processing_guarantee", guarantee)
        if self.commit_interval_ms is None:
            commit = 100 if guarantee is ProcessingGuarantee.EXACTLY_ONCE_V2 else 30_000
        else:
            commit = duration_ms(self.commit_interval_ms, "commit_interval_ms", minimum=0)
            if commit > MAX_COMMIT_INTERVAL_MS:
                given = "" if isinstance(self.commit_interval_ms, int) else f" ({self.commit_interval_ms!r})"
                raise ConfigError(
                    f"commit_interval_ms must be at most {MAX_COMMIT_INTERVAL_MS} ms (24 h), got {commit} ms{given}: "
                    f"an instance would practically never commit, and a crash would replay all its input since "
                    f"the last commit (the default is 30000 ms, 100 ms with exactly-once)")
        set_(self, "commit_interval_ms", commit)
        for field in ("default_key_serde", "default_value_serde"):
            check_serde(getattr(self, field), field, allow_none=False)
        _check_deserialization_handler(self.deserialization_exception_handler)
        _check_named_or_object(self.processing_exception_handler, "processing_exception_handler",
                               PROCESSING_HANDLER_NAMES, "handle(context, record, exception)", dead_letter=True)
        _check_named_or_object(self.production_exception_handler, "production_exception_handler",
                               PRODUCTION_HANDLER_NAMES, "handle(context, record, exception)")
        _check_named_or_object(self.default_timestamp_extractor, "default_timestamp_extractor",
                               TIMESTAMP_EXTRACTOR_NAMES, "extract(record, partition_time)")
        if self.default_dsl_store not in DSL_STORE_TYPES:
            raise ConfigError(
                f"default_dsl_store must be one of {list(DSL_STORE_TYPES)}, "
                f"got {self.default_dsl_store!r}"
            )
        _check_int(self.replication_factor, "replication_factor", minimum=-1)
        if self.replication_factor == 0:
            raise ConfigError("replication_factor must be -1 (broker default) or >= 1, got 0")
        idle = duration_ms(self.max_task_idle_ms, "max_task_idle_ms", minimum=-1)
        set_(self, "max_task_idle_ms", idle)
        set_(self, "task_timeout_ms", duration_ms(self.task_timeout_ms, "task_timeout_ms", minimum=1000))
        _check_int(self.buffered_records_per_partition, "buffered_records_per_partition", minimum=1)
        _check_int(self.statestore_cache_max_bytes, "statestore_cache_max_bytes", minimum=0)
        _check_int(self.statestore_uncommitted_max_bytes, "statestore_uncommitted_max_bytes", minimum=0)
        check_rocksdb_settings(self.rocksdb_memory_bytes, self.rocksdb_write_buffer_bytes, self.rocksdb_config_setter)
        if not isinstance(self.transactional_state_stores, bool):
            raise ConfigError(f"transactional_state_stores must be true or false, "
                              f"got {self.transactional_state_stores!r}")
        if self.on_changelog_loss not in CHANGELOG_LOSS_RESPONSES:
            raise ConfigError(f"on_changelog_loss must be one of {list(CHANGELOG_LOSS_RESPONSES)}, "
                              f"got {self.on_changelog_loss!r}")
        self._check_snapshot_settings()
        set_(self, "rack_aware_assignment_tags", self.assignment_configs().rack_aware_assignment_tags)
        if not isinstance(self.client_tags, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.client_tags.items()):
            raise ConfigError(f"client_tags must map tag keys to values (str to str), got {self.client_tags!r}")
        set_(self, "client_tags", dict(self.client_tags))
        if self.group_instance_id is not None:
            _check_group_instance_id(self.group_instance_id, self.num_stream_threads)
        if self.application_server:
            try:
                check_endpoint(self.application_server)
            except GroupProtocolError as exc:
                raise ConfigError(f"application_server: {exc}") from None
        if self.instance_id is not None and (not isinstance(self.instance_id, str) or not self.instance_id):
            raise ConfigError(f"instance_id must be a non-empty string or None, got {self.instance_id!r}")
        _check_int(self.instance_epoch, "instance_epoch", minimum=0)
        set_(self, "status_interval_ms", duration_ms(self.status_interval_ms, "status_interval_ms", minimum=100))
        if self.host_application is not None:
            set_(self, "host_application", _checked_host_application(self.host_application))
        if self.metrics_port is not None:
            _check_int(self.metrics_port, "metrics_port", minimum=0)
            if self.metrics_port > 65535:
                raise ConfigError(f"metrics_port must be a TCP port 0..65535 (0: any free port) or None, "
                                  f"got {self.metrics_port}")
        set_(self, "repartition_purge_interval_ms",
             duration_ms(self.repartition_purge_interval_ms, "repartition_purge_interval_ms", minimum=0))
        emit = duration_ms(
            self.windowed_aggregation_emit_interval_ms,
            "windowed_aggregation_emit_interval_ms",
            minimum=0,
        )
        set_(self, "windowed_aggregation_emit_interval_ms", emit)
        if not isinstance(self.app_configs, Mapping):
            raise ConfigError(f"app_configs must be a mapping, got {self.app_configs!r}")
        set_(self, "app_configs", dict(self.app_configs))
        self._check_client_settings()

    def _check_client_settings(self) -> None:
        """Known kafka-python settings with values of their type, none the engine decides
        itself, each for a client it applies to (kafka/client_settings.py)."""
        for field, kinds in (("client_configs", CLIENT_KINDS), ("consumer_configs", (CONSUMER,)),
                             ("producer_configs", (PRODUCER,)), ("admin_configs", (ADMIN,))):
            value = getattr(self, field)
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                raise ConfigError(f"{field} must be a mapping of kafka-python setting names to values, "
                                  f"got a {type(value).__name__}")  # never the values: they may hold a password
            check_client_settings(value, field, kinds)
            check_engine_settings(value, field, exactly_once=self.exactly_once)
            object.__setattr__(self, field, dict(value))
        check_consumer_timeouts({**settings_for(CONSUMER, self.client_configs), **self.consumer_configs},
                                "client_configs/consumer_configs")

    def _check_snapshot_settings(self) -> None:
        url = self.snapshot_url
        if url is not None:
            _check_snapshot_url(url)
        options = self.snapshot_storage_options
        if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
            raise ConfigError(f"snapshot_storage_options must map fsspec option names to values, "
                              f"got a {type(options).__name__}")  # never the values: they may be secrets
        object.__setattr__(self, "snapshot_storage_options", dict(options))
        object.__setattr__(self, "snapshot_interval_ms",
                           duration_ms(self.snapshot_interval_ms, "snapshot_interval_ms", minimum=0))
        _check_int(self.snapshot_interval_commits, "snapshot_interval_commits", minimum=0)
        _check_int(self.snapshot_retention_count, "snapshot_retention_count", minimum=1)
        if url is not None and self.snapshot_interval_ms == 0 and self.snapshot_interval_commits == 0:
            raise ConfigError("snapshot_interval_ms and snapshot_interval_commits are both 0: "
                              "snapshots would never be taken; set one of them or snapshot_url=None")
        if url is not None and self.exactly_once and not self.transactional_state_stores:
            raise ConfigError("snapshot_url needs transactional_state_stores=True under exactly-once: without the "
                              "transaction buffer the stores hold uncommitted writes, which a snapshot must not")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> StreamsConfig:
        """Build from a plain mapping (e.g. parsed JSON); unknown keys are an error."""
        if isinstance(values, StreamsConfig):
            return values
        if not isinstance(values, Mapping):
            raise ConfigError(f"streams config must be a mapping, got {type(values).__name__}")
        return cls(**values)

    def with_overrides(self, **changes: Any) -> StreamsConfig:
        """A copy with some values replaced (validated again)."""
        return StreamsConfig.from_mapping({**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        """Plain values, e.g. for JSON; serde and handler objects are kept as they are."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["bootstrap_servers"] = list(self.bootstrap_servers)
        out["processing_guarantee"] = ProcessingGuarantee(self.processing_guarantee).value
        return out

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee is ProcessingGuarantee.EXACTLY_ONCE_V2

    def assignment_configs(self) -> AssignmentConfigs:
        """The high-availability assignor's settings (validated)."""
        return AssignmentConfigs(
            acceptable_recovery_lag=self.acceptable_recovery_lag, max_warmup_replicas=self.max_warmup_replicas,
            num_standby_replicas=self.num_standby_replicas,
            # AssignmentConfigs validates and converts these itself (a timedelta, a list of tags)
            probing_rebalance_interval_ms=self.probing_rebalance_interval_ms,  # type: ignore[arg-type]
            rack_aware_assignment_tags=self.rack_aware_assignment_tags)  # type: ignore[arg-type]

    def task_state_dir(self, task_id: object) -> str:
        """``<state_dir>/<application_id>/<subtopology>_<partition>`` (docs/stores.md, "Store directories")."""
        return os.path.join(self.state_dir, self.application_id, str(task_id))


def _checked_init(generated: Callable[..., None]) -> Callable[..., None]:
    """Wrap the dataclass ``__init__`` so an unknown or missing key is a ConfigError with a
    suggestion (as in :meth:`StreamsConfig.from_mapping`), not a bare TypeError."""
    names = [f.name for f in dataclasses.fields(StreamsConfig)]

    @functools.wraps(generated)
    def __init__(self: StreamsConfig, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise ConfigError(f"StreamsConfig takes at most {len(names)} positional values, got {len(args)}")
        for key in kwargs:
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"unknown streams config key {key!r}{hint}")
        given = set(names[:len(args)]) | set(kwargs)
        for required in ("application_id", "bootstrap_servers"):
            if required not in given:
                raise ConfigError(f"streams config is missing the required key {required!r}")
        generated(self, *args, **kwargs)

    return __init__


StreamsConfig.__init__ = _checked_init(StreamsConfig.__init__)  # type: ignore[method-assign]  # wraps the generated one


def _check_application_id(value: Any) -> None:
    """A legal topic name once the longest suffix every application has (``-query-answers``) is added;
    a task directory ``<state_dir>/<application_id>`` stays inside ``state_dir``."""
    if not isinstance(value, str) or not _APPLICATION_ID_RE.match(value) or value in (".", ".."):
        raise ConfigError(f"application_id must be a non-empty string of [a-zA-Z0-9._-], other than '.' and '..' "
                          f"(it names the consumer group, the internal topics and the state directory), "
                          f"got {value!r}")
    longest = MAX_TOPIC_NAME_LENGTH - len(_LONGEST_TOPIC_SUFFIX)
    if len(value) > longest:
        raise ConfigError(f"application_id is {len(value)} characters long; at most {longest} fit: the internal "
                          f"topic '<application_id>{_LONGEST_TOPIC_SUFFIX}' must stay within Kafka's "
                          f"{MAX_TOPIC_NAME_LENGTH} characters")


def parse_bootstrap_servers(value: Any) -> tuple[str, ...]:
    """``"h1:9092,h2:9092"`` or a list of ``host:port`` -> a tuple of them; ConfigError for an
    entry that is not ``host:port`` with a port in 1..65535 and a host without blanks."""
    if isinstance(value, str):
        servers = [s.strip() for s in value.split(",") if s.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(s, str) for s in value):
        servers = [s.strip() for s in value if s.strip()]
    else:
        raise ConfigError(f"bootstrap_servers must be 'host:port[,host:port...]' or a list of them, got {value!r}")
    if not servers:
        raise ConfigError(f"bootstrap_servers is empty: {value!r}")
    for server in servers:
        scheme, separator, rest = server.partition("://")
        if separator:
            raise ConfigError(f"bootstrap_servers entry {server!r} has a URL scheme ({scheme + separator!r}): Kafka "
                              f"bootstrap servers are host:port without one (give {rest.rstrip('/')!r}; TLS and "
                              f"SASL are client settings such as security_protocol, not a scheme)")
        if "/" in server:
            raise ConfigError(f"bootstrap_servers entry {server!r} is not of the form host:port (a host has no '/')")
        try:
            check_endpoint(server)
        except GroupProtocolError:
            raise ConfigError(f"bootstrap_servers entry {server!r} is not of the form host:port "
                              f"(a host without blanks, a port in 1..65535)") from None
    return tuple(servers)


def _check_group_instance_id(value: Any, threads: int) -> None:
    """Kafka's rules for ``group.instance.id`` (those of a topic name), for the longest id a
    stream thread gets: ``<group_instance_id>-<thread index>``."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"group_instance_id must be a non-empty string or None, got {value!r}")
    problem = topic_name_problem(f"{value}-{threads}")
    if problem is not None:
        raise ConfigError(f"group_instance_id {value!r}: the stream threads use '<group_instance_id>-<index>' "
                          f"as static member ids, which follow Kafka's topic-name rules: "
                          f"{problem.replace('topic name', 'id')}")


def _check_snapshot_url(url: Any) -> None:
    """A URL whose scheme fsspec knows. Whether its implementation (s3fs for s3://) is installed
    depends on the machine, so an instance checks that when it is created (instance/preflight.py)."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"snapshot_url must be a URL such as 'file:///mnt/shared/snapshots' or "
                          f"'s3://bucket/prefix', got {url!r}")
    import fsspec

    scheme = url.split("://", 1)[0]
    if scheme not in fsspec.available_protocols():
        close = difflib.get_close_matches(scheme, fsspec.available_protocols(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"snapshot_url {url!r}: fsspec knows no scheme {scheme!r} ({hint}file, s3, gs, abfs, "
                          f"hdfs, ...: fsspec.available_protocols() lists them)")


def _check_int(value: Any, name: str, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")


def _checked_host_application(value: Any) -> dict[str, Any]:
    """``host_application`` as the status document holds it: kind and application_id
    non-empty strings, ui_url a string or None, nothing else."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"host_application must be a mapping with kind, application_id and ui_url, got {value!r}")
    unknown = sorted(set(value) - {"kind", "application_id", "ui_url"})
    if unknown:
        raise ConfigError(f"host_application has unknown keys {unknown}; it takes kind, application_id and ui_url")
    for key in ("kind", "application_id"):
        if not isinstance(value.get(key), str) or not value[key]:
            raise ConfigError(f"host_application[{key!r}] must be a non-empty string, got {value.get(key)!r}")
    ui_url = value.get("ui_url")
    if ui_url is not None and (not isinstance(ui_url, str) or not ui_url.startswith(("http://", "https://"))):
        raise ConfigError(f"host_application['ui_url'] must be an http(s) URL or None, got {ui_url!r}")
    return {"kind": value["kind"], "application_id": value["application_id"], "ui_url": ui_url}


def _check_deserialization_handler(value: Any) -> None:
    if isinstance(value, str):
        if value in DESERIALIZATION_HANDLER_NAMES:
            return
        topic = value[len("dead_letter:"):].strip() if value.startswith("dead_letter:") else ""
        if topic:
            problem = topic_name_problem(topic)
            if problem is not None:
                raise ConfigError(f"deserialization_exception_handler {value!r}: the dead-letter {problem}")
            return
        raise ConfigError(
            f"deserialization_exception_handler must be one of "
            f"{list(DESERIALIZATION_HANDLER_NAMES)}, 'dead_letter:<topic>' or a handler object, "
            f"got {value!r}"
        )
    if not callable(getattr(value, "handle", None)):
        raise ConfigError(
            f"deserialization_exception_handler object must have a handle(context, record, "
            f"exception) method, got {value!r}"
        )


def _check_named_or_object(value: Any, name: str, names: tuple[str, ...], method: str, *,
                           dead_letter: bool = False) -> None:
    """A built-in by name, "dead_letter:<topic>" where allowed, or an object with ``method``."""
    if isinstance(value, str):
        if value in names or (dead_letter and value.startswith("dead_letter:") and value[12:].strip()):
            return
        allowed = list(names) + (["dead_letter:<topic>"] if dead_letter else [])
        raise ConfigError(f"{name} must be one of {allowed} or an object with {method}, got {value!r}")
    if not callable(getattr(value, method.split("(")[0], None)):
        raise ConfigError(f"{name} object must have a {method} method, got {value!r}")
