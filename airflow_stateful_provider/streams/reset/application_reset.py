"""``reset_application``: Kafka's application reset tool for this engine, on the brokers and
the disk (the plan is plan.py's ResetPlan).

Order, as ``kafka-streams-application-reset`` does it: refuse while the application runs
(a live instance in the status topic, or a member in its consumer group); move the group's
committed input offsets; delete the internal topics; remove the local state. A dry run
(``execute=False``, the default) reads the same and changes nothing.

Which topics are which: the internal topics are ``<application_id>-status``, ``-control``,
``-queries``, ``-query-answers``, ``-topology`` and every ``<application_id>-...-changelog``
and ``-repartition`` topic (not those of another application whose id extends this one).
The input topics are the ones given, or else every other topic the group has committed
offsets on. Sink and dead-letter topics are never touched.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.errors import (
    BrokerUnreachableError,
    ConfigError,
    StreamsError,
    UnknownApplicationError,
)
from airflow_stateful_provider.streams.kafka.clients import connection_errors, construct_client, servers_text
from airflow_stateful_provider.streams.queries.wire import answers_topic_name, queries_topic_name
from airflow_stateful_provider.streams.redeploy.topology_topic import topology_topic_name
from airflow_stateful_provider.streams.reset.plan import OffsetChange, OffsetTarget, ResetPlan, offset_target
from airflow_stateful_provider.streams.status.document import (
    DEFAULT_STALE_AFTER_MS,
    control_topic_name,
    status_topic_name,
)
from airflow_stateful_provider.streams.topics.config_drift import application_internal_topic_names

__all__ = ["internal_topic_names", "reset_application"]

log = logging.getLogger(__name__)

_ENDED = ("NOT_RUNNING", "ERROR")


def internal_topic_names(application_id: str, topics: Iterable[str]) -> list[str]:
    """The application's internal topics among ``topics``, sorted."""
    topics = set(topics)
    exact = {status_topic_name(application_id), control_topic_name(application_id), queries_topic_name(application_id),
             answers_topic_name(application_id), topology_topic_name(application_id)}
    return sorted((exact & topics) | set(application_internal_topic_names(application_id, topics)))


def reset_application(
    bootstrap_servers: str | Sequence[str],
    application_id: str,
    *,
    execute: bool = False,
    to_datetime: str | datetime | None = None,
    by_duration: str | float | timedelta | None = None,
    input_topics: Sequence[str] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    client_configs: Mapping[str, Any] | None = None,
    timeout_ms: int = 60_000,
    stale_after_ms: int = DEFAULT_STALE_AFTER_MS,
    now_ms: int | None = None,
) -> ResetPlan:
    """Plan the reset of ``application_id`` and, with ``execute``, carry it out unless refused.

    ``to_datetime`` / ``by_duration`` (neither: the earliest offsets) say where the input
    offsets go; ``input_topics`` which topics are input (default: every non-internal topic the
    group committed offsets on); ``state_dir`` is searched for the application's local state
    (``<state_dir>/<application_id>`` and, for instances on Spark, ``<state_dir>/*/<application_id>``).
    Returns the plan (``executed`` once carried out; ``refusals`` when an instance is live).
    Raises ConfigError for bad arguments, UnknownApplicationError when the cluster holds
    nothing of the application, BrokerUnreachableError, StreamsError when a step fails.
    """
    try:
        target = offset_target(to_datetime=to_datetime, by_duration=by_duration,
                               now_ms=wall_clock_ms() if now_ms is None else now_ms)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    state_dirs = _local_state_dirs(application_id, state_dir)
    admin = _admin(bootstrap_servers, application_id, client_configs, timeout_ms)
    try:
        plan = _plan(admin, bootstrap_servers, application_id, target, input_topics, state_dirs, client_configs,
                     timeout_ms, stale_after_ms)
        if execute and not plan.refused:
            _execute(admin, plan, timeout_ms)
            plan = dataclasses.replace(plan, executed=True)
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"lost Kafka at {servers_text(bootstrap_servers)} while resetting application "
                                     f"{application_id!r}: {exc}") from exc
    finally:
        admin.close()
    return plan


def _admin(servers: str | Sequence[str], application_id: str, client_configs: Mapping[str, Any] | None,
           timeout_ms: int) -> Any:
    from kafka.admin import KafkaAdminClient

    try:
        return construct_client(KafkaAdminClient, {
            "bootstrap_servers": servers, "client_id": f"{application_id}-reset", "bootstrap_timeout_ms": timeout_ms,
            "request_timeout_ms": max(timeout_ms, 1_000), **(client_configs or {})})
    except connection_errors() as exc:
        raise BrokerUnreachableError(f"cannot reach Kafka at {servers_text(servers)} within {timeout_ms} ms to "
                                     f"reset application {application_id!r}: {exc}") from exc


def _local_state_dirs(application_id: str, state_dir: str | os.PathLike[str] | None) -> list[str]:
    if state_dir is None:
        return []
    root = os.path.abspath(os.fspath(state_dir))
    if not os.path.isdir(root):
        raise ConfigError(f"state_dir {os.fspath(state_dir)!r} is not a directory (give the state_dir of the "
                          f"application's config: it holds <application_id>/<task>/, or <instance_id>/"
                          f"<application_id>/<task>/ for instances on Spark)")
    found = [os.path.join(root, application_id)]
    found += [os.path.join(root, child, application_id) for child in sorted(os.listdir(root))
              if child != application_id and os.path.isdir(os.path.join(root, child))]
    return [path for path in found if os.path.isdir(path)]


def _refusals(admin: Any, servers: str | Sequence[str], application_id: str, topics: set[str],
              client_configs: Mapping[str, Any] | None, timeout_ms: int, stale_after_ms: int) -> list[str]:
    from airflow_stateful_provider.streams.status.reader import fetch_application_status

    refusals = []
    if status_topic_name(application_id) in topics:
        status = fetch_application_status(servers, application_id, stale_after_ms=stale_after_ms,
                                          client_configs=client_configs, timeout_ms=timeout_ms, allow_empty=True)
        live = [f"{i.instance_id} ({i.state}, published {i.age_ms / 1000:.0f}s ago)" for i in status.instances
                if not i.stale and i.state not in _ENDED]
        if live:
            refusals.append(f"live instance(s) in {status_topic_name(application_id)!r}: {', '.join(live)}; stop "
                            f"them first (stateful-streams stop {application_id}); an instance that crashed counts "
                            f"as live until its document is {stale_after_ms / 1000:.0f}s old")
    group = _retrying(lambda: admin.describe_groups([application_id]), timeout_ms,
                      f"describing consumer group {application_id!r}").get(application_id) or {}
    members = [m.get("member_id") or m.get("client_id") for m in group.get("members") or []]
    if members:
        refusals.append(f"consumer group {application_id!r} has {len(members)} active member(s) "
                        f"({group.get('group_state')}): {members}; Kafka refuses to move the offsets of a group "
                        f"with members")
    return refusals


def _retrying(call: Callable[[], Any], timeout_ms: int, what: str) -> Any:
    """``call()``, again while it fails with a retriable Kafka error (the group coordinator not
    there yet: a fresh cluster, a coordinator moving), for up to ``timeout_ms``."""
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            return call()
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise StreamsError(f"{what}: {type(exc).__name__}: {exc}") from exc
            time.sleep(0.2)


def _committed(admin: Any, application_id: str, timeout_ms: int) -> dict[Any, Any]:
    from kafka.errors import GroupIdNotFoundError

    try:
        offsets = _retrying(lambda: admin.list_group_offsets({application_id: None}), timeout_ms,
                            f"reading the committed offsets of consumer group {application_id!r}")
    except StreamsError as exc:
        if isinstance(exc.__cause__, GroupIdNotFoundError):
            return {}
        raise
    return dict(offsets.get(application_id) or {})


def _plan(admin: Any, servers: str | Sequence[str], application_id: str, target: OffsetTarget,
          input_topics: Sequence[str] | None, state_dirs: list[str], client_configs: Mapping[str, Any] | None,
          timeout_ms: int, stale_after_ms: int) -> ResetPlan:
    topics = set(admin.list_topics())
    internal = internal_topic_names(application_id, topics)
    committed = _committed(admin, application_id, timeout_ms)
    if input_topics is not None:
        missing = sorted(set(input_topics) - topics)
        if missing:
            raise ConfigError(f"input topics {missing} do not exist on {servers_text(servers)}")
        inputs = sorted(set(input_topics))
        clash = sorted(set(inputs) & set(internal))
        if clash:
            raise ConfigError(f"{clash} are internal topics of application {application_id!r}, deleted by the "
                              f"reset: not input topics")
    else:
        inputs = sorted(({tp.topic for tp in committed} - set(internal)) & topics)
    if not (internal or committed or inputs or state_dirs):
        raise UnknownApplicationError(
            f"unknown application {application_id!r}: no internal topic, no committed offsets of group "
            f"{application_id!r} on {servers_text(servers)} and no local state given (a typo, or another cluster)")
    refusals = _refusals(admin, servers, application_id, topics, client_configs, timeout_ms, stale_after_ms)
    offsets = _offset_changes(admin, inputs, committed, target, timeout_ms)
    notes = []
    if target.timestamp_ms is not None:
        notes.append("a partition without a record at or after that time goes to its end offset")
    notes.append("source, sink and dead-letter topics are kept; only the group's offsets on the input topics move")
    return ResetPlan(application_id, target, tuple(offsets), tuple(internal), tuple(state_dirs), tuple(refusals),
                     tuple(notes))


def _offset_changes(admin: Any, inputs: list[str], committed: Mapping[Any, Any], target: OffsetTarget,
                    timeout_ms: int) -> list[OffsetChange]:
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec

    if not inputs:
        return []
    partitions = [TopicPartition(d["name"], p["partition_index"])
                  for d in admin.describe_topics(inputs) for p in d.get("partitions") or []]
    partitions.sort(key=lambda tp: (tp.topic, tp.partition))
    earliest = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in partitions}, timeout_ms=timeout_ms)
    latest = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in partitions}, timeout_ms=timeout_ms)
    if target.timestamp_ms is None:
        wanted = {tp: earliest[tp].offset for tp in partitions}
    else:
        found = admin.list_partition_offsets({tp: target.timestamp_ms for tp in partitions}, timeout_ms=timeout_ms)
        wanted = {tp: found[tp].offset if found[tp].offset >= 0 else latest[tp].offset for tp in partitions}
    return [OffsetChange(tp.topic, tp.partition, committed[tp].offset if tp in committed else None,
                         min(max(wanted[tp], earliest[tp].offset), latest[tp].offset)) for tp in partitions]


def _execute(admin: Any, plan: ResetPlan, timeout_ms: int) -> None:
    from kafka import OffsetAndMetadata, TopicPartition
    from kafka.errors import NoError

    app = plan.application_id
    if plan.offsets:
        results = admin.alter_group_offsets(app, {TopicPartition(o.topic, o.partition): OffsetAndMetadata(
            o.target, "", -1) for o in plan.offsets})
        failed = {f"{tp.topic}-{tp.partition}": error.__name__ for tp, error in results.items() if error is not NoError}
        if failed:
            raise StreamsError(f"reset of application {app!r}: moving the offsets of group {app!r} failed {failed} "
                               f"(an instance starting?); nothing else was changed")
        log.info("reset %s: %d input offsets of group %s set to %s", app, len(plan.offsets), app, plan.target.text)
    if plan.topics_to_delete:
        admin.delete_topics(list(plan.topics_to_delete), timeout_ms=timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000
        while left := sorted(set(plan.topics_to_delete) & set(admin.list_topics())):
            if time.monotonic() > deadline:
                raise StreamsError(f"reset of application {app!r}: topics {left} still listed {timeout_ms} ms after "
                                   f"their deletion (offsets were already moved; run the reset again)")
            time.sleep(0.2)
        log.info("reset %s: deleted %s", app, list(plan.topics_to_delete))
    for path in plan.state_dirs_to_remove:
        shutil.rmtree(path)
        log.info("reset %s: removed %s", app, path)
