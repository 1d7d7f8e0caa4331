"""Every bad setting is refused before anything is created on the broker.

Each case builds a topology and a config the way a user would, then creates and starts a
``KafkaStreams`` instance on the real broker. The case must fail with the expected error
type, the message must name the setting, and the broker's topic list must be the same
before and after: no internal, status, control or dead-letter topic was created.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient

from airflow_stateful_provider.streams import (
    BrokerUnreachableError,
    ConfigError,
    Consumed,
    DeadLetterQueueExceptionHandler,
    Grouped,
    KafkaStreams,
    Materialized,
    Produced,
    Stores,
    StreamsBuilder,
    StreamsConfig,
    Topology,
    TopologyError,
)
from tests.integration.s3_server import free_port
from tools.kafka.topics import create_topics, topic_configs

pytestmark = pytest.mark.kafka

#: The bound the unreachable-broker case sets (admin_configs' bootstrap_timeout_ms).
UNREACHABLE_BOUND_MS = 3_000


@dataclasses.dataclass
class Context:
    servers: str
    source: str
    app: str
    tmp_path: Path


def topic_names(servers: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def letter_counts(ctx: Context, *, consumed: Consumed | None = None, materialized: Materialized | None = None,
                  sink: str | None = None) -> Topology:
    """Values re-keyed by their first letter (a repartition topic), counted (a changelog)."""
    builder = StreamsBuilder()
    (builder.stream(ctx.source, consumed or Consumed.with_("string", "string"))
     .group_by(lambda key, value: value[:1], Grouped.with_("string", "string"))
     .count(materialized or Materialized.as_("letter-counts"))
     .to_stream()
     .to(sink or f"{ctx.app}-out", Produced.with_("string", "int64")))
    return builder.build()


def start(ctx: Context, topology: Topology | None = None, **settings: Any) -> None:
    """Create and start an instance (closed again if it started, which fails the case)."""
    config = StreamsConfig(**{"application_id": ctx.app, "bootstrap_servers": ctx.servers,
                              "state_dir": str(ctx.tmp_path / "state"), **settings})
    streams = KafkaStreams(topology if topology is not None else letter_counts(ctx), config)
    try:
        streams.start()
    finally:
        streams.close(timeout=60)


def unwritable_dir(tmp_path: Path) -> str:
    """A directory nobody can create anything in: read-only for a normal user; for root
    (who writes anywhere) /sys/fs, whose file system refuses new entries."""
    path = tmp_path / "read-only"
    path.mkdir()
    path.chmod(0o555)
    probe = path / "probe"
    try:
        probe.touch()
    except PermissionError:
        return str(path)
    probe.unlink()
    try:
        Path("/sys/fs/probe").touch()
    except OSError:
        return "/sys/fs"
    pytest.skip("no unwritable directory on this machine")


def file_in(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a directory")
    return path


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    error: type[Exception]
    #: What the message must contain: the setting (and, where it helps, the value).
    names: tuple[str, ...]
    run: Callable[[Context], None]


def table_of(ctx: Context, store: str) -> Topology:
    builder = StreamsBuilder()
    builder.table(ctx.source, Consumed.with_("string", "string"), Materialized.as_(store))
    return builder.build()


def source_named(topic: str) -> Topology:
    builder = StreamsBuilder()
    builder.stream(topic).to("out")
    return builder.build()


def store_builder_with(serde: Any) -> Callable[[Context], None]:
    def run(ctx: Context) -> None:
        topology = Topology().add_source("in", ctx.source).add_processor("p", lambda: None, "in")
        topology.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("s"), serde), "p")
    return run


CASES = [
    # application_id: Kafka's topic-name rules, also for the internal topics built from it
    Case("application_id '..'", ConfigError, ("application_id", "'..'"), lambda c: start(c, application_id="..")),
    Case("application_id '.'", ConfigError, ("application_id", "'.'"), lambda c: start(c, application_id=".")),
    Case("application_id longer than the query answers topic allows", ConfigError, ("application_id", "242"),
         lambda c: start(c, application_id="a" * 242)),
    Case("application_id too long for the changelog and repartition topics", ConfigError,
         ("application_id (235 characters)", "249"), lambda c: start(c, application_id="a" * 235)),
    Case("store name that makes an illegal changelog topic", ConfigError, ("'by:key'", "changelog"),
         lambda c: start(c, table_of(c, "by:key"))),
    # state_dir: created and proven writable before any topic
    Case("state_dir is a file", ConfigError, ("state_dir", "a-file"),
         lambda c: start(c, state_dir=str(file_in(c.tmp_path)))),
    Case("state_dir below a file", ConfigError, ("state_dir", "a-file"),
         lambda c: start(c, state_dir=str(file_in(c.tmp_path) / "state"))),
    Case("state_dir unwritable", ConfigError, ("state_dir",),
         lambda c: start(c, state_dir=unwritable_dir(c.tmp_path))),
    # kafka-python client settings
    Case("unknown client_configs key", ConfigError, ("client_configs", "sesion_timeout_ms", "session_timeout_ms"),
         lambda c: start(c, client_configs={"sesion_timeout_ms": 10_000})),
    Case("session_timeout_ms 'abc'", ConfigError, ("consumer_configs", "session_timeout_ms", "'abc'"),
         lambda c: start(c, consumer_configs={"session_timeout_ms": "abc"})),
    Case("a consumer setting in producer_configs", ConfigError, ("producer_configs", "fetch_max_wait_ms"),
         lambda c: start(c, producer_configs={"fetch_max_wait_ms": 100})),
    Case("a setting the engine decides", ConfigError, ("client_configs", "group_id", "application_id"),
         lambda c: start(c, client_configs={"group_id": "other"})),
    Case("consumer timeouts kafka-python refuses", ConfigError, ("request_timeout_ms", "fetch_max_wait_ms"),
         lambda c: start(c, consumer_configs={"request_timeout_ms": 400})),
    Case("idempotence off under exactly-once", ConfigError, ("producer_configs", "enable_idempotence"),
         lambda c: start(c, processing_guarantee="exactly_once_v2", producer_configs={"enable_idempotence": False})),
    # the brokers
    Case("replication_factor above the live brokers", ConfigError, ("replication_factor", "1 live broker"),
         lambda c: start(c, replication_factor=2)),
    Case("brokers unreachable", BrokerUnreachableError, ("cannot reach Kafka at 127.0.0.1:", "bootstrap_servers"),
         lambda c: start(c, bootstrap_servers=f"127.0.0.1:{free_port()}",
                         admin_configs={"bootstrap_timeout_ms": UNREACHABLE_BOUND_MS})),
    # topic names
    Case("dead-letter topic name", ConfigError, ("deserialization_exception_handler", "'bad topic'"),
         lambda c: start(c, deserialization_exception_handler="dead_letter:bad topic")),
    Case("dead-letter handler object with an illegal topic", ConfigError, ("dead-letter", "'bad topic'"),
         lambda c: start(c, deserialization_exception_handler=DeadLetterQueueExceptionHandler("bad topic"))),
    Case("sink topic name", TopologyError, ("sink", "'out put'"), lambda c: start(c, letter_counts(c, sink="out put"))),
    Case("source topic name", TopologyError, ("source", "'..'"), lambda c: start(c, source_named(".."))),
    # serdes by name
    Case("serde 'avro' in Consumed", ConfigError, ("Consumed key_serde", "'avro'"),
         lambda c: start(c, letter_counts(c, consumed=Consumed.with_("avro", "string")))),
    Case("serde 'avro' in Materialized", ConfigError, ("Materialized value_serde", "'avro'"),
         lambda c: start(c, letter_counts(c, materialized=Materialized.as_("m").with_value_serde("avro")))),
    Case("serde 'avro' on a source", ConfigError, ("source 'in' value_serde", "'avro'"),
         lambda c: start(c, Topology().add_source("in", c.source, value_serde="avro"))),
    Case("serde 'avro' on a store", ConfigError, ("state store 's' key_serde", "'avro'"), store_builder_with("avro")),
    Case("default serde 'avro'", ConfigError, ("default_value_serde", "'avro'"),
         lambda c: start(c, default_value_serde="avro")),
    # everything else the config alone can tell
    Case("snapshot_url scheme", ConfigError, ("snapshot_url", "'foo'"), lambda c: start(c, snapshot_url="foo://x")),
    Case("bootstrap port 0", ConfigError, ("bootstrap_servers", "'localhost:0'"),
         lambda c: start(c, bootstrap_servers="localhost:0")),
    Case("bootstrap port 99999", ConfigError, ("bootstrap_servers", "'localhost:99999'"),
         lambda c: start(c, bootstrap_servers="localhost:99999")),
    Case("bootstrap host with a space", ConfigError, ("bootstrap_servers", "'my host:9092'"),
         lambda c: start(c, bootstrap_servers="my host:9092")),
    Case("bootstrap server with a URL scheme", ConfigError, ("bootstrap_servers", "'http://host:9092'", "URL scheme"),
         lambda c: start(c, bootstrap_servers="http://host:9092")),
    Case("commit interval above its bound", ConfigError, ("commit_interval_ms", str(10**30), "86400000"),
         lambda c: start(c, commit_interval_ms=10**30)),
    Case("rack_aware_assignment_tags as a string", ConfigError, ("rack_aware_assignment_tags", "'zone'"),
         lambda c: start(c, rack_aware_assignment_tags="zone")),
    Case("unknown StreamsConfig keyword", ConfigError, ("comit_interval_ms", "commit_interval_ms"),
         lambda c: start(c, comit_interval_ms=100)),
    Case("group_instance_id with a space", ConfigError, ("group_instance_id",),
         lambda c: start(c, group_instance_id="my instance")),
]


def test_every_case_has_its_own_id():
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def source_topic(bootstrap_servers) -> str:
    name = f"validation-in-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap_servers, {name: 2})
    return name


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_a_bad_setting_fails_naming_it_and_creates_nothing(case, bootstrap_servers, source_topic, tmp_path):
    ctx = Context(bootstrap_servers, source_topic, f"validation-{uuid.uuid4().hex[:8]}", tmp_path)
    before = topic_names(bootstrap_servers)
    started = time.monotonic()
    try:
        with pytest.raises(case.error) as raised:
            case.run(ctx)
    finally:
        if (tmp_path / "read-only").exists():
            (tmp_path / "read-only").chmod(0o755)  # so that pytest can remove it
    elapsed = time.monotonic() - started
    message = str(raised.value)
    for name in case.names:
        assert name in message
    assert topic_names(bootstrap_servers) == before
    if case.error is BrokerUnreachableError:
        # bounded by the setting (plus the time a busy machine needs to notice)
        assert elapsed < UNREACHABLE_BOUND_MS / 1000 + 20, elapsed


@pytest.mark.parametrize(("store", "configs", "names"), [
    ("letter-counts", {"cleanup.policy": "delete", "retention.ms": "1000"},
     ("cleanup.policy=delete", "retention.ms=1000", "--add-config 'cleanup.policy=compact'")),
    ("letter-counts", {"cleanup.policy": "compact,delete", "retention.ms": "60000"},
     ("retention.ms=60000", "the store keeps its keys forever")),
], ids=["delete-1s", "compact-delete-60s"])
def test_a_precreated_changelog_that_loses_state_is_refused_and_nothing_is_created(
        bootstrap_servers, source_topic, tmp_path, store, configs, names):
    """A changelog created by hand before the first start with a cleanup policy or retention
    that drops the store's data: start() names the topic, the settings and the repair (the
    ChangelogConfigOperator), and creates nothing (no repartition, status, control or query
    topic; the changelog's configs untouched)."""
    ctx = Context(bootstrap_servers, source_topic, f"validation-{uuid.uuid4().hex[:8]}", tmp_path)
    changelog = f"{ctx.app}-{store}-changelog"
    create_topics(bootstrap_servers, {changelog: 2, f"{ctx.app}-out": 1}, configs={changelog: configs})
    before = topic_names(bootstrap_servers)
    described_before = topic_configs(bootstrap_servers, changelog)
    with pytest.raises(ConfigError) as raised:
        start(ctx)
    message = str(raised.value)
    for name in (f"changelog topic {changelog!r}", f"of store {store!r}", *names, "ChangelogConfigOperator",
                 "nothing was created"):
        assert name in message, message
    assert topic_names(bootstrap_servers) == before
    assert sorted(t for t in before if t.startswith(ctx.app)) == sorted([changelog, f"{ctx.app}-out"])
    assert topic_configs(bootstrap_servers, changelog) == described_before


def test_a_precreated_changelog_that_keeps_state_is_accepted(bootstrap_servers, source_topic, tmp_path):
    """The check refuses only what loses state: a compacted changelog created beforehand is used."""
    ctx = Context(bootstrap_servers, source_topic, f"validation-{uuid.uuid4().hex[:8]}", tmp_path)
    changelog = f"{ctx.app}-letter-counts-changelog"
    create_topics(bootstrap_servers, {changelog: 2, f"{ctx.app}-out": 1},
                  configs={changelog: {"cleanup.policy": "compact", "retention.ms": "1000"}})
    start(ctx)
    assert {f"{ctx.app}-status", f"{ctx.app}-control", changelog} <= topic_names(bootstrap_servers)


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="needs gcsfs not to be installed")
def test_a_snapshot_url_whose_implementation_is_missing_names_the_package(bootstrap_servers, source_topic, tmp_path):
    ctx = Context(bootstrap_servers, source_topic, f"validation-{uuid.uuid4().hex[:8]}", tmp_path)
    before = topic_names(bootstrap_servers)
    with pytest.raises(ConfigError, match=r"snapshot_url 'gs://bucket/snapshots'.*pip install gcsfs"):
        start(ctx, snapshot_url="gs://bucket/snapshots")
    assert topic_names(bootstrap_servers) == before


def test_the_spark_driver_refuses_a_changelog_that_loses_state_before_creating_its_topics(
        bootstrap_servers, source_topic, tmp_path):
    """The driver creates the status and control topics before any instance starts: it makes
    the same changelog check first, so a refused submission leaves nothing on the broker."""
    from airflow_stateful_provider.spark.app import _prepare_topics

    ctx = Context(bootstrap_servers, source_topic, f"validation-{uuid.uuid4().hex[:8]}", tmp_path)
    changelog = f"{ctx.app}-letter-counts-changelog"
    create_topics(bootstrap_servers, {changelog: 2}, configs={changelog: {"cleanup.policy": "delete"}})
    before = topic_names(bootstrap_servers)
    config = StreamsConfig(application_id=ctx.app, bootstrap_servers=bootstrap_servers,
                           state_dir=str(tmp_path / "state"))
    with pytest.raises(ConfigError, match=f"changelog topic '{changelog}' of store 'letter-counts'.*cleanup.policy="
                                          f"delete.*ChangelogConfigOperator"):
        _prepare_topics(config, letter_counts(ctx))
    assert topic_names(bootstrap_servers) == before
    _prepare_topics(config)  # without the topology (as before): only the status and control topics
    assert {f"{ctx.app}-status", f"{ctx.app}-control"} <= topic_names(bootstrap_servers)
