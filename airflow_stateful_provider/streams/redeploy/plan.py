"""TopologyPlan: what deploying a new topology does to the state the recorded one left.

Each store of either topology gets a verdict, as an on-call engineer needs to read it:

- **kept**: its changelog and store directories carry over (a change the data follows, such
  as another inactivity gap or time to live, is listed with it);
- **new**: it starts empty;
- **dropped**: its changelog stays on the brokers, orphaned (nothing reads or deletes it);
- **incompatible**: the data on the brokers or disks cannot follow the change: another kind
  (the changelog holds another record format), another key or value serde (every byte was
  written by the old one), another partition count (each key is in another task's changelog
  partition), another window type, another value of a setting its store directories refuse to
  change (retention, segment interval: the kind's required metadata), logging newly enabled
  (the new changelog would start empty under a full store), or a store without changelog
  moving or leaving disk.

A repartition topic whose partition count changes is incompatible too (start refuses it).
The plan is compatible when nothing is incompatible. Pure: two RecordedTopology in, the plan out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow_stateful_provider.streams.redeploy.recorded_topology import (
    RecordedTopology,
    StoreDescription,
    TopicDescription,
)

__all__ = ["DROPPED", "INCOMPATIBLE", "KEPT", "NEW", "Change", "StorePlan", "TopicPlan", "TopologyPlan",
           "plan_redeploy"]

KEPT, NEW, DROPPED, INCOMPATIBLE = "kept", "new", "dropped", "incompatible"
_VERDICTS = (KEPT, NEW, DROPPED, INCOMPATIBLE)


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference of a store or topic: ``what`` changed, from ``recorded`` to ``new``;
    ``why`` it matters; ``compatible``: the data follows it."""

    what: str
    recorded: Any
    new: Any
    why: str
    compatible: bool

    def text(self) -> str:
        return f"{self.what} {_value(self.recorded)} -> {_value(self.new)}: {self.why}"


@dataclasses.dataclass(frozen=True)
class StorePlan:
    """One store's verdict (KEPT, NEW, DROPPED or INCOMPATIBLE) and its changes."""

    name: str
    verdict: str
    recorded: StoreDescription | None
    new: StoreDescription | None
    changes: tuple[Change, ...] = ()

    @property
    def description(self) -> StoreDescription:
        """The new description, or the recorded one for a dropped store."""
        found = self.new or self.recorded
        assert found is not None  # a plan has at least one side
        return found

    def to_json_dict(self) -> dict[str, Any]:
        store = self.description
        return {"name": self.name, "verdict": self.verdict, "kind": store.kind, "key_serde": store.key_serde,
                "value_serde": store.value_serde, "partitions": store.partitions,
                "changelog_topic": store.changelog_topic, "changes": [dataclasses.asdict(c) for c in self.changes]}


@dataclasses.dataclass(frozen=True)
class TopicPlan:
    """One repartition topic's verdict."""

    topic: str
    verdict: str
    recorded_partitions: int | None
    new_partitions: int | None

    def to_json_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class TopologyPlan:
    """The plan of deploying a new topology over ``recorded`` (see module docstring)."""

    application_id: str
    recorded_at_ms: int | None
    recorded_by: str
    stores: tuple[StorePlan, ...]
    repartition_topics: tuple[TopicPlan, ...]
    sources_added: tuple[str, ...] = ()
    sources_removed: tuple[str, ...] = ()
    sinks_added: tuple[str, ...] = ()
    sinks_removed: tuple[str, ...] = ()

    def stores_with(self, verdict: str) -> list[StorePlan]:
        return [s for s in self.stores if s.verdict == verdict]

    @property
    def compatible(self) -> bool:
        return not self.stores_with(INCOMPATIBLE) and all(t.verdict != INCOMPATIBLE for t in self.repartition_topics)

    @property
    def orphaned_topics(self) -> list[str]:
        """Topics the new topology no longer uses: dropped stores' changelogs, changelogs of
        stores no longer logged, dropped repartition topics."""
        topics = [s.recorded.changelog_topic for s in self.stores
                  if s.recorded is not None and s.recorded.changelog_topic is not None
                  and (s.new is None or s.new.changelog_topic is None)]
        topics += [t.topic for t in self.repartition_topics if t.verdict == DROPPED]
        return sorted(topics)

    def to_json_dict(self) -> dict[str, Any]:
        return {"application_id": self.application_id, "compatible": self.compatible,
                "recorded_at_ms": self.recorded_at_ms, "recorded_by": self.recorded_by,
                "stores": {verdict: [s.to_json_dict() for s in self.stores_with(verdict)] for verdict in _VERDICTS},
                "repartition_topics": [t.to_json_dict() for t in self.repartition_topics],
                "orphaned_topics": self.orphaned_topics,
                "sources": {"added": list(self.sources_added), "removed": list(self.sources_removed)},
                "sinks": {"added": list(self.sinks_added), "removed": list(self.sinks_removed)}}

    def text(self) -> str:
        """The plan for a person: the verdict first, then the stores under their verdicts."""
        app = self.application_id
        verdict = "compatible" if self.compatible else "INCOMPATIBLE"
        when = "at an unknown time" if self.recorded_at_ms is None else \
            datetime.fromtimestamp(self.recorded_at_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        lines = [f"topology plan for application {app!r}: {verdict}",
                 f"  compared with the topology recorded {when} by {self.recorded_by}"]
        for title, verdict_name in (("stores kept", KEPT), ("new stores, starting empty", NEW),
                                    ("dropped stores, their changelogs orphaned", DROPPED),
                                    ("stores changed incompatibly", INCOMPATIBLE)):
            stores = self.stores_with(verdict_name)
            if not stores:
                continue
            lines.append(f"{title} ({len(stores)}):")
            for store in stores:
                lines.append(f"  {store.name}: {_store_text(store.description)}")
                lines += [f"    {'changed' if c.compatible else 'CANNOT FOLLOW'}: {c.text()}" for c in store.changes]
        for topic in self.repartition_topics:
            if topic.verdict != KEPT:
                partitions = topic.new_partitions if topic.verdict == NEW else topic.recorded_partitions
                what = {NEW: "new", DROPPED: "dropped, orphaned", INCOMPATIBLE: (
                    f"INCOMPATIBLE: has {topic.recorded_partitions} partitions, the topology needs "
                    f"{topic.new_partitions} (start refuses it)")}[topic.verdict]
                lines.append(f"repartition topic {topic.topic} ({partitions} partitions): {what}")
        for what, topics in (("input topics added", self.sources_added),
                             ("input topics no longer read", self.sources_removed),
                             ("output topics added", self.sinks_added),
                             ("output topics no longer written", self.sinks_removed)):
            if topics:
                lines.append(f"{what}: {', '.join(topics)}")
        if not self.stores:
            lines.append("no state stores in either topology")
        if not self.compatible:
            lines.append(f"to deploy it anyway: stop the application and reset it (stateful-streams reset {app} "
                         f"--execute): every store starts over from the input; or keep the recorded topology")
        if self.orphaned_topics:
            lines.append(f"orphaned topics (kept on the brokers, unused; delete them once their data is not needed): "
                         f"{', '.join(self.orphaned_topics)}")
        if self.stores_with(NEW) and self.stores_with(DROPPED):
            lines.append("note: a renamed store is a dropped store and a new one; its state does not move")
        return "\n".join(lines)


def _value(value: Any) -> str:
    return "none" if value is None else str(value)


def _store_text(store: StoreDescription) -> str:
    where = "RocksDB" if store.persistent else "in memory"
    changelog = store.changelog_topic or "no changelog"
    return (f"{store.kind} ({where}), serdes {store.key_serde}/{store.value_serde}, {store.partitions} "
            f"partition(s), {changelog}")


def plan_redeploy(recorded: RecordedTopology, new: RecordedTopology) -> TopologyPlan:
    """The plan of deploying ``new`` where ``recorded`` ran (see module docstring)."""
    stores: list[StorePlan] = []
    for name in sorted({s.name for s in recorded.stores} | {s.name for s in new.stores}):
        old_store, new_store = recorded.store(name), new.store(name)
        if old_store is None:
            stores.append(StorePlan(name, NEW, None, new_store))
        elif new_store is None:
            stores.append(StorePlan(name, DROPPED, old_store, None))
        else:
            changes = tuple(store_changes(old_store, new_store))
            verdict = KEPT if all(c.compatible for c in changes) else INCOMPATIBLE
            stores.append(StorePlan(name, verdict, old_store, new_store, changes))
    return TopologyPlan(
        recorded.application_id, recorded.recorded_at_ms, recorded.recorded_by, tuple(stores),
        tuple(_topic_plans(recorded.repartition_topics, new.repartition_topics)),
        *_added_removed(recorded.sources, new.sources), *_added_removed(recorded.sinks, new.sinks))


def store_changes(old: StoreDescription, new: StoreDescription) -> list[Change]:
    """Every difference between the recorded and the new description of one store."""
    changes: list[Change] = []
    if old.kind != new.kind:
        changes.append(Change("kind", old.kind, new.kind, f"its changelog and directories hold {old.kind} records, "
                              f"which a {new.kind} store cannot read", False))
    for what, before, after in (("key_serde", old.key_serde, new.key_serde),
                                ("value_serde", old.value_serde, new.value_serde)):
        if before != after:
            changes.append(Change(what, before, after, f"the stored data was written with {before}", False))
    if old.partitions != new.partitions:
        changes.append(Change("partitions", old.partitions, new.partitions,
                              "each key's state sits in the changelog partition of its old task; with another "
                              "partition count it belongs to another task", False))
    if old.window_type != new.window_type:
        changes.append(Change("window_type", old.window_type, new.window_type,
                              "the stored windows cannot be read as another window type", False))
    if old.kind == new.kind:
        for setting in sorted(set(old.settings) | set(new.settings)):
            was, now = old.settings.get(setting), new.settings.get(setting)
            if was == now:
                continue
            if setting in new.fixed_settings:
                changes.append(Change(setting, was, now, "the store directories were built with "
                                      f"{_value(was)} and refuse another value; the data cannot follow", False))
            else:
                changes.append(Change(setting, was, now, "applies to the data from now on; the data follows", True))
    changes += _durability_changes(old, new)
    return changes


def _durability_changes(old: StoreDescription, new: StoreDescription) -> list[Change]:
    """Changes of changelog, persistence and subtopology: fine while a changelog carries the
    state over; without one, the state stays behind."""
    changes: list[Change] = []
    if old.changelog_topic != new.changelog_topic:
        if old.changelog_topic is None:
            changes.append(Change("changelog", None, new.changelog_topic, "logging enabled: the new changelog starts "
                                  "empty under a full store, and a restore would lose every key written before",
                                  False))
        else:
            changes.append(Change("changelog", old.changelog_topic, new.changelog_topic,
                                  "logging disabled: the store keeps its local data, but nothing restores it on "
                                  "another host; the old changelog is orphaned", True))
    logged = old.changelog_topic is not None and new.changelog_topic is not None
    if old.persistent != new.persistent:
        where = {True: "RocksDB", False: "in memory"}
        changes.append(Change("persistent", where[old.persistent], where[new.persistent],
                              "rebuilt from its changelog" if logged else
                              "without a changelog, the state does not move between the two", logged))
    if old.subtopology != new.subtopology:
        changes.append(Change("subtopology", old.subtopology, new.subtopology,
                              "its tasks get other ids and restore it from its changelog" if logged else
                              "its tasks get other ids, and without a changelog nothing restores it", logged))
    return changes


def _topic_plans(recorded: Iterable[TopicDescription], new: Iterable[TopicDescription]) -> list[TopicPlan]:
    before = {t.topic: t.partitions for t in recorded}
    after = {t.topic: t.partitions for t in new}
    plans = []
    for topic in sorted(set(before) | set(after)):
        if topic not in before:
            verdict = NEW
        elif topic not in after:
            verdict = DROPPED
        else:
            verdict = KEPT if before[topic] == after[topic] else INCOMPATIBLE
        plans.append(TopicPlan(topic, verdict, before.get(topic), after.get(topic)))
    return plans


def _added_removed(recorded: Sequence[TopicDescription],
                   new: Sequence[TopicDescription]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    before, after = {t.topic for t in recorded}, {t.topic for t in new}
    return tuple(sorted(after - before)), tuple(sorted(before - after))
