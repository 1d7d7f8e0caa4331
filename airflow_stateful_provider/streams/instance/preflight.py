"""Checks an instance makes before it creates anything: on the brokers, or on disk.

StreamsConfig checks what the config alone can tell. What needs the topology (the internal
topic names ``<application_id>-<store>-changelog`` must be legal Kafka names), the machine
(``state_dir`` must be a writable directory, the fsspec implementation of ``snapshot_url``
must be installed) or the brokers (reachable within a bound, with
at least ``replication_factor`` of them, pre-created changelogs able to hold their stores'
data) is checked here, by ``KafkaStreams`` and by the
Spark driver, before the first topic is created. Each failure is a ConfigError or a
BrokerUnreachableError naming the setting and the fix.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import BrokerUnreachableError, ConfigError
from airflow_stateful_provider.streams.kafka.authorization import missing_acl, refusal_in
from airflow_stateful_provider.streams.kafka.clients import (
    check_client_environment,
    connection_errors,
    connection_failures,
    describe_failures,
    servers_text,
)
from airflow_stateful_provider.streams.kafka.retrying_admin import RetryingAdmin
from airflow_stateful_provider.streams.processing.deserialization import (
    DeadLetterQueueExceptionHandler,
    deserialization_handler_from_config,
)
from airflow_stateful_provider.streams.processing.error_handling import (
    ProcessingDeadLetterHandler,
    processing_handler_from_config,
)
from airflow_stateful_provider.streams.topic_names import MAX_TOPIC_NAME_LENGTH, topic_name_problem
from airflow_stateful_provider.streams.topics.changelog_safety import unsafe_changelog_settings
from airflow_stateful_provider.streams.topics.internal_topics import InternalTopic, internal_topics
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = [
    "check_existing_changelogs",
    "check_replication_factor",
    "check_snapshot_storage",
    "check_topic_names",
    "dead_letter_topics",
    "open_admin",
    "prepare_state_dir",
]


def dead_letter_topics(config: StreamsConfig) -> dict[str, str]:
    """The dead-letter topics of the config's exception handlers ("dead_letter:<topic>"), each
    with the setting that names it (the instance creates them when missing)."""
    topics: dict[str, str] = {}
    handler = deserialization_handler_from_config(config.deserialization_exception_handler)
    if isinstance(handler, DeadLetterQueueExceptionHandler):
        topics[handler.topic] = "deserialization_exception_handler"
    processing = processing_handler_from_config(config.processing_exception_handler)
    if isinstance(processing, ProcessingDeadLetterHandler):
        topics.setdefault(processing.topic, "processing_exception_handler")
    return topics


def check_topic_names(topology: Topology, config: StreamsConfig) -> None:
    """Every topic the application creates is a legal Kafka name: its changelog and repartition
    topics (names built from ``application_id`` and store or operation names) and the
    dead-letter topic. StreamsConfig checked that the status and control topics fit; source
    and sink names were checked when the topology was built."""
    app = config.application_id
    for topic in internal_topics(topology, app):
        problem = topic_name_problem(topic.name)
        if problem is None:
            continue
        what = f"the changelog topic of store {topic.store!r}" if topic.store else f"a {topic.kind} topic"
        fix = (f"shorten application_id ({len(app)} characters) or the store or operation name"
               if len(topic.name) > MAX_TOPIC_NAME_LENGTH else "rename the store or operation")
        raise ConfigError(f"{what} would be illegal: {problem}; {fix}")
    for dead_letter, setting in dead_letter_topics(config).items():
        problem = topic_name_problem(dead_letter)
        if problem is not None:
            raise ConfigError(f"{setting}: the dead-letter {problem}")


def prepare_state_dir(config: StreamsConfig) -> str:
    """Create ``<state_dir>/<application_id>`` and prove it writable (as Kafka Streams' StateDirectory
    does when the instance is created); returns it. ConfigError naming state_dir otherwise."""
    app_dir = os.path.join(config.state_dir, config.application_id)
    try:
        os.makedirs(app_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=app_dir, prefix=".write-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        where = f" ({exc.filename})" if exc.filename else ""
        raise ConfigError(f"state_dir {config.state_dir!r} cannot hold the task directories of application "
                          f"{config.application_id!r}: {reason}{where}; point state_dir at a writable "
                          f"directory") from None
    return app_dir


def check_snapshot_storage(config: StreamsConfig) -> None:
    """The fsspec implementation of ``snapshot_url``'s scheme loads on this machine (s3fs for
    s3://, gcsfs for gs://, ...); else a ConfigError saying what to install."""
    if config.snapshot_url is None:
        return
    import fsspec
    from fsspec.registry import known_implementations

    scheme = config.snapshot_url.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(scheme)
    except ImportError as exc:
        package = known_implementations.get(scheme, {}).get("class", "").split(".")[0]
        install = f"pip install {package}" if package and package != "fsspec" else "install what it names"
        raise ConfigError(f"snapshot_url {config.snapshot_url!r}: the fsspec implementation of {scheme}:// cannot "
                          f"be loaded on this machine ({exc}); {install}") from None


def open_admin(config: StreamsConfig, factory: Callable[[], Any]) -> Any:
    """``factory()``, the instance's first admin client; ConfigError when the security settings
    cannot work on this machine (kafka.clients.check_client_environment), BrokerUnreachableError
    naming the bootstrap servers, and why the connections failed, when the brokers cannot be
    reached within its ``bootstrap_timeout_ms``."""
    from kafka import KafkaAdminClient

    settings = {**config.client_configs, **config.admin_configs}
    check_client_environment(settings, "client_configs/admin_configs")
    bound = settings.get("bootstrap_timeout_ms", KafkaAdminClient.DEFAULT_CONFIG["bootstrap_timeout_ms"])

    def unanswered(call: str, error: BaseException, waited_ms: int) -> BaseException:
        return BrokerUnreachableError(
            f"no broker of {servers_text(config.bootstrap_servers)} answered the admin call {call} within {bound} ms "
            f"(starting application {config.application_id!r}; the bound is bootstrap_timeout_ms in client_configs "
            f"or admin_configs): {error}")

    try:
        with connection_failures() as failures:
            return RetryingAdmin(factory(), bound, unanswered)
    except connection_errors() as exc:
        raise BrokerUnreachableError(
            f"cannot reach Kafka at {servers_text(config.bootstrap_servers)} within {bound} ms (starting application "
            f"{config.application_id!r}; nothing was created): check bootstrap_servers and that the brokers are "
            f"up (the bound is bootstrap_timeout_ms in client_configs or admin_configs): {exc}"
            f"{describe_failures(failures)}") from exc


def check_replication_factor(admin: Any, config: StreamsConfig) -> None:
    """``replication_factor`` is at most the number of live brokers (else every topic creation
    would fail, after the ones before it succeeded)."""
    if config.replication_factor == -1:
        return
    brokers = admin.describe_cluster().get("brokers") or []
    if config.replication_factor > len(brokers):
        raise ConfigError(f"replication_factor is {config.replication_factor} but the cluster at "
                          f"{servers_text(config.bootstrap_servers)} has {len(brokers)} live broker(s); set "
                          f"replication_factor to at most {len(brokers)} (or -1 for the broker default)")


_DESCRIBING_CONFIGS = "checking that the existing changelogs {} can hold their stores' data"


def _describe_topic_configs(admin: Any, topics: list[str]) -> dict[str, dict[str, str | None]]:
    from kafka.admin import ConfigResource, ConfigResourceType

    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics],
                                           config_filter="all")
    except Exception as exc:
        if refusal_in(exc) is None:
            raise
        raise missing_acl("topic", topics, "DescribeConfigs", doing=_DESCRIBING_CONFIGS.format(topics)) from None
    # kafka-python (3.0.12) drops a per-topic refusal and answers no configs; an existing topic
    # has every config with config_filter "all", so none at all is the refusal
    refused = [t for t in topics if not described.get("topic", {}).get(t)]
    if refused:
        raise missing_acl("topic", refused, "DescribeConfigs", doing=_DESCRIBING_CONFIGS.format(refused))
    return {name: {key: entry.get("value") for key, entry in configs.items()}
            for name, configs in described.get("topic", {}).items() if name in topics}


def check_existing_changelogs(admin: Any, topics: Iterable[InternalTopic], config: StreamsConfig) -> None:
    """A changelog that already exists (created by hand, or edited since) keeps its store's data:
    ``cleanup.policy`` with ``compact`` and a ``retention.ms`` the store's data fits in
    (topics/changelog_safety.py). ConfigError naming the topic, the settings and the repair
    otherwise, before anything is created."""
    changelogs = {t.name: t for t in topics if t.kind == "changelog"}
    if not changelogs:
        return
    existing = sorted(set(admin.list_topics()) & set(changelogs))
    if not existing:
        return
    actual = _describe_topic_configs(admin, existing)
    problems = []
    for name in existing:
        unsafe = unsafe_changelog_settings(changelogs[name], actual.get(name, {}))
        if not unsafe:
            continue
        repair = {u.key: u.repair for u in unsafe if u.repair is not None}
        settings = "; ".join(u.text() for u in unsafe)
        alter = ",".join(f"{key}={value}" for key, value in repair.items())
        problems.append(f"changelog topic {name!r} of store {changelogs[name].store!r} cannot hold the store's "
                        f"data: {settings}. Repair: kafka-configs.sh --alter --entity-type topics --entity-name "
                        f"{name} --add-config '{alter}'")
    if problems:
        raise ConfigError(
            f"application {config.application_id!r} cannot start: a restore would lose state (nothing was "
            f"created). " + " ".join(problems) + f". Or from Airflow: ChangelogConfigOperator(application_id="
            f"{config.application_id!r}, topology=..., repair=True) sets every changelog config the topology "
            f"needs (docs/maintenance.md); then start again")
