"""StreamsPartitionAssignor: the kafka-python 3 partition assignor of a streams application.

Every stream thread's consumer joins the group ``<application_id>`` with one instance of
this assignor (protocol name ``"stream"``, as Kafka Streams). Why a custom assignor: the
unit of work is a *task*, not a partition; tasks carry state whose location matters; and a
rebalance must not stop tasks that stay where they are. So:

- ``metadata()`` (every member, on each join) encodes a :class:`SubscriptionInfo` from the
  thread's :class:`AssignorContext`: process id, previous tasks, changelog offset sums, client
  tags, endpoint; and, under the cooperative protocol, the partitions the member still owns.
- ``assign()`` (the leader) groups members by process into clients, turns partition counts
  into tasks, computes lags from live changelog end offsets (docs/semantics.md §3), runs the
  high-availability task assignor (``task_assignor.assign``; ``assign_without_lags`` plus a
  follow-up rebalance when end offsets cannot be fetched), spreads each client's tasks over
  its threads, and encodes one :class:`AssignmentInfo` per member.
- ``on_assignment()`` (every member) decodes its AssignmentInfo and hands it, with the
  member's partitions, to the thread through ``AssignorContext.on_assignment``.

Rebalance protocol: COOPERATIVE (KIP-429) by default. Members keep their partitions across
a rebalance; the leader never gives a member a partition another member still owns: such a
task is left unassigned for one round (kept as a standby where the new owner had one), its
owner sees it missing and revokes it, kafka-python then rejoins by itself, and the new owner
is also told to rebalance at once (``next_rebalance_ms = 0``); in that second round the
partition is free and moves. Tasks that do not move are never revoked. See
docs/group-protocol.md.

Threading: kafka-python 3 calls ``metadata()``, ``assign()`` and ``on_assignment()`` on the
consumer's IO thread while the stream thread is blocked in ``poll()``. The context's
callables therefore must not call blocking methods of that consumer; ``fetch_end_offsets``
must use a *different* client (an admin client or a dedicated consumer), whose own IO thread
serves the call.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from kafka.structs import TopicPartition

from airflow_stateful_provider.streams.assignment.assignment_configs import AssignmentConfigs
from airflow_stateful_provider.streams.assignment.assignment_info import (
    NO_FOLLOWUP_REBALANCE,
    REBALANCE_IMMEDIATELY,
    AssignmentInfo,
    AssignorError,
)
from airflow_stateful_provider.streams.assignment.client_state import ClientState
from airflow_stateful_provider.streams.assignment.group_protocol import (
    EARLIEST_SUPPORTED_VERSION,
    LATEST_SUPPORTED_VERSION,
    peek_versions,
)
from airflow_stateful_provider.streams.assignment.lag import (
    LATEST_OFFSET,
    UNKNOWN_OFFSET_SUM,
    compute_task_lags,
)
from airflow_stateful_provider.streams.assignment.subscription_info import SubscriptionInfo, check_endpoint
from airflow_stateful_provider.streams.assignment.task_assignor import (
    AssignmentResult,
    assign,
    assign_without_lags,
)
from airflow_stateful_provider.streams.assignment.task_partitions import TaskPartitions, task_partitions
from airflow_stateful_provider.streams.assignment.thread_assignment import assign_tasks_to_threads
from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.errors import (
    ConfigError,
    GroupProtocolError,
    IllegalStateError,
    TopologyError,
    UnsupportedGroupProtocolVersionError,
)
from airflow_stateful_provider.streams.kafka.assignor_api import (
    AbstractPartitionAssignor,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    RebalanceProtocol,
)
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = [
    "STREAMS_ASSIGNOR_NAME",
    "AssignorContext",
    "StreamsPartitionAssignor",
]

log = logging.getLogger(__name__)

#: The group protocol name (Kafka Streams uses the same).
STREAMS_ASSIGNOR_NAME = "stream"
#: Version of the consumer protocol's own subscription schema we send: 1 is the first with
#: ``owned_partitions`` (KIP-429).
_CONSUMER_PROTOCOL_VERSION = 1


def _no_tasks() -> Collection[TaskId]:
    return ()


def _no_offset_sums() -> Mapping[TaskId, int]:
    return {}


@dataclasses.dataclass(frozen=True)
class AssignorContext:
    """What one stream thread's assignor needs from its thread and instance (the role of Kafka
    Streams' ``ReferenceContainer``). Callables are read on the consumer's IO thread at each
    join (see the module docstring), so they must be cheap and non-blocking.

    - ``process_id``: the instance; all threads of one instance pass the same id.
    - ``application_id``, ``topology``: to compute tasks and changelog topics.
    - ``fetch_end_offsets(partitions) -> {partition: end offset}``: live changelog end offsets
      (leader only). May raise or omit partitions: the leader then assigns without lags and
      schedules a follow-up rebalance. Bound it (e.g. ``timeout_ms`` a few seconds): it blocks
      the leader's IO thread, heartbeats included, so it must end well within
      ``session_timeout_ms``.
    - ``on_assignment(info, partitions)``: called with the decoded AssignmentInfo and the
      member's full partition set after every rebalance (IO thread; record, don't block).
    - ``configs``: the high-availability assignor's settings (used when this member leads).
    - ``client_tags``, ``endpoint``: ``client_tag.*`` values and ``host:port`` (or ``""``).
    - ``previous_active_tasks()``, ``previous_standby_tasks()``: what this thread runs now.
    - ``task_offset_sums()``: per task with local state on this *process*, its changelog
      offset sum; ``-2`` for a running active (docs/semantics.md §3).
    - ``owned_partitions()``: the partitions the consumer owns now, e.g.
      ``lambda: consumer.assignment()``. Without it the assignor remembers its last assignment,
      which is wrong after the member lost its partitions (session timeout); pass it.
    - ``clock_ms()``: wall-clock epoch ms (probing rebalance times are wall-clock).
    """

    process_id: uuid.UUID
    application_id: str
    topology: Topology
    fetch_end_offsets: Callable[[Collection[TopicPartition]], Mapping[TopicPartition, int]]
    on_assignment: Callable[[AssignmentInfo, frozenset[TopicPartition]], None]
    configs: AssignmentConfigs = dataclasses.field(default_factory=AssignmentConfigs)
    client_tags: Mapping[str, str] = dataclasses.field(default_factory=dict)
    endpoint: str = ""
    previous_active_tasks: Callable[[], Collection[TaskId]] = _no_tasks
    previous_standby_tasks: Callable[[], Collection[TaskId]] = _no_tasks
    task_offset_sums: Callable[[], Mapping[TaskId, int]] = _no_offset_sums
    owned_partitions: Callable[[], Collection[TopicPartition]] | None = None
    clock_ms: Callable[[], int] = wall_clock_ms

    def __post_init__(self) -> None:
        if not isinstance(self.process_id, uuid.UUID):
            raise ConfigError(f"process_id must be a uuid.UUID, "
                              f"got {type(self.process_id).__name__} {self.process_id!r}")
        if not isinstance(self.application_id, str) or not self.application_id:
            raise ConfigError(f"application_id must be a non-empty str, got {self.application_id!r}")
        if not isinstance(self.topology, Topology):
            raise ConfigError(f"topology must be a Topology, got {type(self.topology).__name__}")
        if not isinstance(self.configs, AssignmentConfigs):
            raise ConfigError(f"configs must be AssignmentConfigs, got {type(self.configs).__name__} {self.configs!r}")
        tags = dict(self.client_tags)
        for key, value in tags.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ConfigError(f"client_tags must map str to str, got {key!r}: {value!r}")
        object.__setattr__(self, "client_tags", MappingProxyType(tags))
        try:
            check_endpoint(self.endpoint)
        except GroupProtocolError as exc:
            raise ConfigError(str(exc)) from None
        for name in ("fetch_end_offsets", "on_assignment", "previous_active_tasks", "previous_standby_tasks",
                     "task_offset_sums", "clock_ms"):
            if not callable(getattr(self, name)):
                raise ConfigError(f"{name} must be callable, got {getattr(self, name)!r}")
        if self.owned_partitions is not None and not callable(self.owned_partitions):
            raise ConfigError(f"owned_partitions must be callable or None, got {self.owned_partitions!r}")


#: Poll timeout while a consumer is rejoining its group (kafka/group_join.py: ``group_rejoining``).
#: Busy members polling with timeout 0 while rejoining were seen to drop out of the group
#: (heartbeats stop during a join, and with timeout 0 the join made no progress before the
#: session timeout), so every poll gives the JoinGroup/SyncGroup round trip this long; the
#: thread processes between polls, and a join that completes after a poll returned is kept
#: (kafka/group_join.py). 2 s polls worked too but paused every task ~2 s.
REBALANCE_POLL_MS = 200


@dataclasses.dataclass
class _Member:
    """One JoinGroup member as the leader sees it."""

    member_id: str
    group_instance_id: str | None
    owned: frozenset[TopicPartition]
    info: SubscriptionInfo | None = None
    future_version: tuple[int, int] | None = None  # (used, latest) of an unreadable newer subscription
    problem: str | None = None  # why its subscription could not be read

    @property
    def subscription(self) -> SubscriptionInfo:
        """The subscription of a member whose subscription was read (``info`` is not None)."""
        if self.info is None:
            raise IllegalStateError(f"member {self.member_id}: its subscription was not read ({self.problem})")
        return self.info


def _owned_partitions(metadata: Any) -> frozenset[TopicPartition]:
    return frozenset(
        TopicPartition(entry.topic, p)
        for entry in (getattr(metadata, "owned_partitions", None) or ())
        for p in entry.partitions
    )


def _read_member(member: Any) -> _Member:
    metadata = member.metadata
    result = _Member(member.member_id, getattr(member, "group_instance_id", None), _owned_partitions(metadata))
    user_data = getattr(metadata, "user_data", None)
    if not user_data:
        result.problem = "its subscription carries no streams subscription data (a consumer of another kind?)"
        return result
    try:
        result.info = SubscriptionInfo.decode(bytes(user_data))
    except UnsupportedGroupProtocolVersionError:
        result.future_version = peek_versions(bytes(user_data), "subscription data")
    except GroupProtocolError as exc:
        result.problem = str(exc)
    return result


def _merge_offset_sums(infos: Iterable[SubscriptionInfo]) -> dict[TaskId, int]:
    """Offset sums of one client from its members' reports: a running active (-2) wins, then
    the largest known sum; unknown (-3) only when nothing else was reported."""
    merged: dict[TaskId, int] = {}
    for info in infos:
        for task, total in info.task_offset_sums.items():
            current = merged.get(task)
            if current is None or current == UNKNOWN_OFFSET_SUM or total == LATEST_OFFSET:
                merged[task] = total
            elif current != LATEST_OFFSET and total != UNKNOWN_OFFSET_SUM:
                merged[task] = max(current, total)
    return merged


def _consumer_assignment(partitions: Iterable[TopicPartition], info: AssignmentInfo) -> ConsumerProtocolAssignment:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    # (topic, partitions) tuples, as kafka-python's own assignors: they encode, and
    # ``.partitions()`` works on the object before encoding too.
    return ConsumerProtocolAssignment(_CONSUMER_PROTOCOL_VERSION, list(by_topic.items()), info.encode())


class StreamsPartitionAssignor(AbstractPartitionAssignor):
    """The ``"stream"`` assignor; one instance per stream-thread consumer (see module docstring).

    Pass it as ``KafkaConsumer(..., partition_assignment_strategy=[assignor])``, alone: the
    coordinator refuses to mix cooperative and eager assignors. ``rebalance_protocol=EAGER``
    exists for comparisons (every rebalance then revokes everything first).
    """

    name = STREAMS_ASSIGNOR_NAME

    def __init__(
        self, context: AssignorContext, *, rebalance_protocol: RebalanceProtocol = RebalanceProtocol.COOPERATIVE
    ) -> None:
        if not isinstance(context, AssignorContext):
            raise ConfigError(f"context must be an AssignorContext, got {type(context).__name__} {context!r}")
        if rebalance_protocol not in (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER):
            raise ConfigError(f"rebalance_protocol must be COOPERATIVE or EAGER, got {rebalance_protocol!r}")
        self.context = context
        self.rebalance_protocol = RebalanceProtocol(rebalance_protocol)
        #: Version of the subscription data this member sends (lowered by version probing).
        self.used_version = LATEST_SUPPORTED_VERSION
        #: The last AssignmentInfo received, and its generation.
        self.assignment_info: AssignmentInfo | None = None
        self.generation: int | None = None
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._unique_field = 0
        self._error_code = AssignorError.NONE
        #: The leader's last result, for logs and tests (None on other members).
        self.last_result: AssignmentResult | None = None

    # ------------------------------------------------------------------ every member

    def supported_protocols(self) -> list[RebalanceProtocol]:
        return [self.rebalance_protocol]

    @property
    def cooperative(self) -> bool:
        return self.rebalance_protocol is RebalanceProtocol.COOPERATIVE

    def request_application_shutdown(self) -> None:
        """Ask the whole application to shut down (KIP-671): the next subscription carries
        SHUTDOWN_REQUESTED and the leader answers every member with it. Call
        ``request_rebalance`` (kafka/group_join.py) afterwards."""
        self._error_code = AssignorError.SHUTDOWN_REQUESTED

    def subscription_info(self) -> SubscriptionInfo:
        """This member's subscription data now (also advances ``unique_field``)."""
        ctx = self.context
        self._unique_field = (self._unique_field + 1) % 256
        active = frozenset(ctx.previous_active_tasks())
        return SubscriptionInfo(
            process_id=ctx.process_id,
            previous_active_tasks=active,
            previous_standby_tasks=frozenset(ctx.previous_standby_tasks()) - active,
            task_offset_sums=dict(ctx.task_offset_sums()),
            client_tags=ctx.client_tags,
            endpoint=ctx.endpoint,
            error_code=int(self._error_code),
            unique_field=self._unique_field,
            version=self.used_version,
            latest_supported_version=LATEST_SUPPORTED_VERSION,
        )

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolSubscription:
        owned: Collection[TopicPartition] = ()
        if self.cooperative:
            source = self.context.owned_partitions
            owned = (source() or ()) if source is not None else self._assigned
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(TopicPartition(tp[0], tp[1]) for tp in owned):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return ConsumerProtocolSubscription(
            version=_CONSUMER_PROTOCOL_VERSION,
            topics=sorted(topics),
            user_data=self.subscription_info().encode(),
            owned_partitions=[
                ConsumerProtocolSubscription.TopicPartition(topic=topic, partitions=parts)
                for topic, parts in by_topic.items()
            ],
        )

    def on_assignment(self, assignment: ConsumerProtocolAssignment, generation: int) -> None:
        partitions = frozenset(assignment.partitions())
        user_data = assignment.user_data
        if not user_data:
            raise GroupProtocolError(
                f"generation {generation}: the assignment carries no streams assignment data; is another "
                f"kind of consumer leading group {self.context.application_id!r}?"
            )
        info = AssignmentInfo.decode(bytes(user_data))
        if partitions != info.active_partitions:
            raise GroupProtocolError(
                f"generation {generation}: assigned partitions {sorted(partitions)} differ from the partitions "
                f"of the assigned active tasks {sorted(info.active_partitions)}"
            )
        # Version probing / upgrade: send what every member can read from now on.
        target = max(EARLIEST_SUPPORTED_VERSION, min(LATEST_SUPPORTED_VERSION, info.latest_supported_version))
        if target != self.used_version:
            log.info("%s: subscription version %d -> %d (the group supports up to %d)",
                     self.context.application_id, self.used_version, target, info.latest_supported_version)
            if target > self.used_version and info.next_rebalance_ms == NO_FOLLOWUP_REBALANCE:
                info = dataclasses.replace(info, next_rebalance_ms=REBALANCE_IMMEDIATELY)
            self.used_version = target
        self._assigned = partitions
        self.assignment_info = info
        self.generation = generation
        self.context.on_assignment(info, partitions)

    # ------------------------------------------------------------------ leader

    def assign(self, cluster: Any, members: Iterable[Any]) -> dict[str, ConsumerProtocolAssignment]:
        """The leader's assignment: ``{member_id: ConsumerProtocolAssignment}`` (module docstring)."""
        read = sorted((_read_member(m) for m in members), key=lambda m: m.member_id)
        readable = [m for m in read if m.info is not None]
        out: dict[str, ConsumerProtocolAssignment] = {}
        encode_version = min([m.subscription.version for m in readable] or [LATEST_SUPPORTED_VERSION])
        common_version = min([m.subscription.latest_supported_version for m in readable] + [LATEST_SUPPORTED_VERSION])

        def info_for(**fields: Any) -> AssignmentInfo:
            return AssignmentInfo(version=encode_version, latest_supported_version=common_version, **fields)

        for m in read:
            if m.future_version is not None:
                log.info("member %s subscribed with version %d (supports %d); version probing: it gets nothing and "
                         "rejoins with version %d", m.member_id, *m.future_version, LATEST_SUPPORTED_VERSION)
                out[m.member_id] = _consumer_assignment((), AssignmentInfo(
                    next_rebalance_ms=REBALANCE_IMMEDIATELY, error_code=AssignorError.VERSION_PROBING,
                    version=LATEST_SUPPORTED_VERSION, latest_supported_version=LATEST_SUPPORTED_VERSION))
            elif m.problem is not None:
                log.error("member %s: unreadable subscription, it gets nothing: %s", m.member_id, m.problem)
                out[m.member_id] = _consumer_assignment((), info_for(error_code=AssignorError.ASSIGNMENT_ERROR))
        if not readable:
            return out

        def everyone(error: AssignorError) -> dict[str, ConsumerProtocolAssignment]:
            out.update({m.member_id: _consumer_assignment((), info_for(error_code=error)) for m in readable})
            return out

        if any(m.subscription.error_code == AssignorError.SHUTDOWN_REQUESTED for m in readable):
            asking = sorted(str(m.subscription.process_id) for m in readable
                            if m.subscription.error_code == AssignorError.SHUTDOWN_REQUESTED)
            log.warning("application shutdown requested by %s; telling every member", asking)
            return everyone(AssignorError.SHUTDOWN_REQUESTED)

        tasks = self._task_partitions(cluster)
        if isinstance(tasks, AssignorError):
            return everyone(tasks)

        now_ms = self.context.clock_ms()
        clients: dict[uuid.UUID, list[_Member]] = {}
        for m in readable:
            clients.setdefault(m.subscription.process_id, []).append(m)
        result = self._assign_tasks(clients, tasks, now_ms)
        self.last_result = result
        out.update(self._member_assignments(clients, tasks, result, read, info_for))
        return out

    def _task_partitions(self, cluster: Any) -> TaskPartitions | AssignorError:
        ctx = self.context
        topology = ctx.topology
        counts: dict[str, int] = {}
        missing: list[str] = []
        for sub in topology.subtopologies():
            for raw in sub.source_topics:
                real = topology.decorate_topic(raw, ctx.application_id)
                partitions = cluster.partitions_for_topic(real)
                if partitions:
                    counts[real] = len(partitions)
                elif not topology.is_internal_topic(raw):
                    missing.append(real)
        if missing:
            log.warning("no partition metadata for source topics %s; assigning nothing (a rebalance follows when "
                        "their metadata arrives)", sorted(set(missing)))
            return AssignorError.INCOMPLETE_SOURCE_TOPIC_METADATA
        try:
            return task_partitions(topology, ctx.application_id, counts)
        except TopologyError as exc:
            log.error("cannot compute the tasks of %s: %s", ctx.application_id, exc)
            return AssignorError.ASSIGNMENT_ERROR

    def _end_offset_sums(self, tasks: TaskPartitions) -> dict[TaskId, int] | None:
        """Sum of live end offsets per stateful task, or None when they cannot be fetched."""
        wanted = tasks.all_changelog_partitions()
        if not wanted:
            return {}
        try:
            ends = self.context.fetch_end_offsets(sorted(wanted))
        except Exception as exc:  # noqa: BLE001 - any failure means "no lags this round"
            log.warning("could not fetch changelog end offsets (%r); assigning by previous ownership and "
                        "scheduling a follow-up rebalance", exc)
            return None
        found = {TopicPartition(tp[0], tp[1]): offset for tp, offset in dict(ends or {}).items()}
        absent = sorted(wanted - set(found))
        bad = sorted(tp for tp in wanted & set(found)
                     if isinstance(found[tp], bool) or not isinstance(found[tp], int) or found[tp] < 0)
        if absent or bad:
            log.warning("changelog end offsets incomplete (missing %s, invalid %s); assigning by previous "
                        "ownership and scheduling a follow-up rebalance", absent[:10], bad[:10])
            return None
        return {task: sum(found[tp] for tp in parts)
                for task, parts in tasks.changelog_partitions.items() if parts}

    def _assign_tasks(self, clients: Mapping[uuid.UUID, list[_Member]], tasks: TaskPartitions,
                      now_ms: int) -> AssignmentResult:
        end_sums = self._end_offset_sums(tasks)
        states = []
        for pid, members in sorted(clients.items()):
            infos = [m.subscription for m in members]
            active = frozenset().union(*(i.previous_active_tasks for i in infos))
            standby = frozenset().union(*(i.previous_standby_tasks for i in infos)) - active
            tags = infos[0].client_tags
            if any(dict(i.client_tags) != dict(tags) for i in infos):
                log.warning("members of client %s report different client tags; using %s", pid, dict(tags))
            lags = compute_task_lags(_merge_offset_sums(infos), end_sums) if end_sums is not None else {}
            states.append(ClientState(pid, capacity=len(members), previous_active_tasks=active,
                                      previous_standby_tasks=standby, task_lags=lags, client_tags=tags))
        run = assign if end_sums is not None else assign_without_lags
        return run(states, tasks.stateful_tasks, tasks.stateless_tasks, self.context.configs, now_ms)

    def _member_assignments(
        self,
        clients: Mapping[uuid.UUID, list[_Member]],
        tasks: TaskPartitions,
        result: AssignmentResult,
        everyone: list[_Member],
        info_for: Callable[..., AssignmentInfo],
    ) -> dict[str, ConsumerProtocolAssignment]:
        owners: dict[TopicPartition, set[str]] = {}
        if self.cooperative:
            for m in everyone:
                for tp in m.owned:
                    owners.setdefault(tp, set()).add(m.member_id)
        stateful = tasks.stateful_tasks
        partitions_by_host: dict[str, set[TopicPartition]] = {}
        standby_partitions_by_host: dict[str, set[TopicPartition]] = {}
        for pid, members in clients.items():
            endpoint = members[0].subscription.endpoint
            if endpoint:
                client = result.clients[pid]
                partitions_by_host.setdefault(endpoint, set()).update(
                    tp for t in client.active_tasks for tp in tasks.input_partitions[t])
                standby_partitions_by_host.setdefault(endpoint, set()).update(
                    tp for t in client.standby_tasks for tp in tasks.input_partitions[t])
        hosts = {h: frozenset(p) for h, p in partitions_by_host.items()}
        standby_hosts = {h: frozenset(p) for h, p in standby_partitions_by_host.items() if p}

        out: dict[str, ConsumerProtocolAssignment] = {}
        for pid, members in sorted(clients.items()):
            client = result.clients[pid]
            member_ids = [m.member_id for m in members]
            threads = assign_tasks_to_threads(
                member_ids,
                client.active_tasks & stateful,
                client.active_tasks - stateful,
                client.standby_tasks,
                {m.member_id: m.subscription.previous_active_tasks for m in members},
                {m.member_id: m.subscription.previous_standby_tasks for m in members},
            )
            probe_at = result.next_probing_rebalance_ms  # one member carries it; None once given
            for m in members:
                given = threads[m.member_id]
                active: dict[TaskId, frozenset[TopicPartition]] = {}
                withheld: list[TaskId] = []
                for task in sorted(given.active_tasks):
                    parts = tasks.input_partitions[task]
                    if any(owners.get(tp, set()) - {m.member_id} for tp in parts):
                        withheld.append(task)  # still owned by another member: moves next round
                    else:
                        active[task] = parts
                standby = {t: tasks.changelog_partitions[t] for t in given.standby_tasks}
                for task in withheld:
                    if task in stateful and task in m.subscription.previous_standby_tasks:
                        standby[task] = tasks.changelog_partitions[task]  # keep its copy warm meanwhile
                if withheld:
                    next_ms = REBALANCE_IMMEDIATELY
                    probe_at = None
                    log.info("member %s: tasks %s wait for their current owners to revoke them; follow-up "
                             "rebalance requested", m.member_id, [str(t) for t in withheld])
                elif probe_at is not None:
                    next_ms, probe_at = probe_at, None
                else:
                    next_ms = NO_FOLLOWUP_REBALANCE
                info = info_for(
                    active_tasks=active,
                    standby_tasks=standby,
                    warmup_tasks=client.warmup_tasks & given.standby_tasks,
                    partitions_by_host=hosts,
                    standby_partitions_by_host=standby_hosts,
                    next_rebalance_ms=next_ms,
                )
                out[m.member_id] = _consumer_assignment(info.active_partitions, info)
            log.info("client %s (%d threads): active %s, standby %s, warmup %s", pid, len(members),
                     [str(t) for t in sorted(client.active_tasks)], [str(t) for t in sorted(client.standby_tasks)],
                     [str(t) for t in sorted(client.warmup_tasks)])
        if result.probing_rebalance_needed:
            log.info("probing rebalance scheduled at %d (%d active, %d standby movements pending)",
                     result.next_probing_rebalance_ms, result.active_task_movements, result.standby_task_movements)
        return out
