"""plan_redeploy: each kind of change between a recorded topology and a new one, with the
verdict and the words an on-call engineer reads (pure: both sides described without a broker)."""

from __future__ import annotations

from datetime import timedelta

from airflow_stateful_provider.streams import Materialized, Serdes, SessionWindows, Stores, StreamsBuilder
from airflow_stateful_provider.streams.redeploy.plan import DROPPED, INCOMPATIBLE, KEPT, NEW, plan_redeploy
from tests.unit.streams.redeploy.topologies import APP, described, store_topology


def counts(value_serde=None, name="counts", in_memory=False):
    supplier = (Stores.in_memory_key_value_store if in_memory else Stores.persistent_key_value_store)(name)
    return Stores.key_value_store_builder(supplier, Serdes.string(), value_serde or Serdes.int64())


def sessions(retention=timedelta(hours=1), name="visits"):
    return Stores.session_store_builder(Stores.persistent_session_store(name, retention), Serdes.string(),
                                        Serdes.json())


def verdicts(plan):
    return {store.name: store.verdict for store in plan.stores}


def test_the_same_topology_keeps_every_store_and_is_compatible():
    plan = plan_redeploy(described(store_topology(counts(), sessions())), described(store_topology(counts(),
                                                                                                   sessions())))
    assert verdicts(plan) == {"counts": KEPT, "visits": KEPT}
    assert plan.compatible and plan.orphaned_topics == []
    assert all(store.changes == () for store in plan.stores)
    text = plan.text()
    assert text.startswith(f"topology plan for application '{APP}': compatible\n")
    assert "stores kept (2):" in text and "2023-11-14 22:13:20 UTC" in text
    assert "  counts: key_value (RocksDB), serdes string/int64, 4 partition(s), shop-counts-changelog" in text


def test_a_new_store_starts_empty_and_a_dropped_one_orphans_its_changelog():
    plan = plan_redeploy(described(store_topology(counts(), sessions())),
                         described(store_topology(counts(), counts(name="refunds"))))
    assert verdicts(plan) == {"counts": KEPT, "refunds": NEW, "visits": DROPPED}
    assert plan.compatible
    assert plan.orphaned_topics == ["shop-visits-changelog"]
    text = plan.text()
    assert "new stores, starting empty (1):\n  refunds: key_value" in text
    assert "dropped stores, their changelogs orphaned (1):\n  visits: session" in text
    assert "orphaned topics (kept on the brokers, unused; delete them once their data is not needed): " \
           "shop-visits-changelog" in text
    assert "a renamed store is a dropped store and a new one" in text
    document = plan.to_json_dict()
    assert [s["name"] for s in document["stores"]["new"]] == ["refunds"]
    assert [s["name"] for s in document["stores"]["dropped"]] == ["visits"]
    assert document["compatible"] is True


def test_another_value_serde_is_incompatible():
    plan = plan_redeploy(described(store_topology(counts())), described(store_topology(counts(Serdes.string()))))
    assert verdicts(plan) == {"counts": INCOMPATIBLE} and not plan.compatible
    [change] = plan.stores[0].changes
    assert (change.what, change.recorded, change.new, change.compatible) == ("value_serde", "int64", "string", False)
    text = plan.text()
    assert text.startswith(f"topology plan for application '{APP}': INCOMPATIBLE\n")
    assert "    CANNOT FOLLOW: value_serde int64 -> string: the stored data was written with int64" in text
    assert f"stateful-streams reset {APP} --execute" in text


def test_the_default_serde_counts_as_the_serde_it_names():
    defaulted = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"))
    recorded = described(store_topology(defaulted), default_key_serde="string", default_value_serde="int64")
    assert plan_redeploy(recorded, described(store_topology(counts()))).compatible
    changed = described(store_topology(defaulted), default_key_serde="string", default_value_serde="json")
    assert [c.what for c in plan_redeploy(recorded, changed).stores[0].changes] == ["value_serde"]


def test_another_kind_is_incompatible():
    recorded = described(store_topology(counts(name="visits")))
    plan = plan_redeploy(recorded, described(store_topology(sessions())))
    assert verdicts(plan) == {"visits": INCOMPATIBLE}
    assert [c.what for c in plan.stores[0].changes] == ["kind", "value_serde", "window_type"]
    assert plan.stores[0].changes[0].why == ("its changelog and directories hold key_value records, which a "
                                              "session store cannot read")


def test_another_partition_count_is_incompatible():
    plan = plan_redeploy(described(store_topology(counts()), partitions=4),
                         described(store_topology(counts()), partitions=6))
    [change] = plan.stores[0].changes
    assert (change.what, change.recorded, change.new, change.compatible) == ("partitions", 4, 6, False)
    assert not plan.compatible


def test_another_retention_is_incompatible_another_gap_is_not():
    plan = plan_redeploy(described(store_topology(sessions(timedelta(hours=1)))),
                         described(store_topology(sessions(timedelta(hours=2)))))
    assert verdicts(plan) == {"visits": INCOMPATIBLE}
    assert [(c.what, c.recorded, c.new, c.compatible) for c in plan.stores[0].changes] == [
        ("retention_ms", 3_600_000, 7_200_000, False), ("segment_interval_ms", 1_800_000, 3_600_000, False)]

    def windowed(gap_minutes):
        builder = StreamsBuilder()
        (builder.stream("orders").group_by_key()
         .windowed_by(SessionWindows.of_inactivity_gap_and_grace(timedelta(minutes=gap_minutes), timedelta(0)))
         .count(Materialized.as_("visits").with_retention(timedelta(hours=1))).to_stream().to("totals"))
        return described(builder.build())

    plan = plan_redeploy(windowed(5), windowed(10))
    assert verdicts(plan) == {"visits": KEPT} and plan.compatible
    [change] = plan.stores[0].changes
    assert (change.what, change.recorded, change.new, change.compatible) == ("inactivity_gap_ms", 300_000, 600_000,
                                                                              True)
    assert "    changed: inactivity_gap_ms 300000 -> 600000: applies to the data from now on" in plan.text()


def test_logging_enabled_is_incompatible_and_disabled_orphans_the_changelog():
    logged, unlogged = counts(), counts().with_logging_disabled()
    enabled = plan_redeploy(described(store_topology(unlogged)), described(store_topology(counts())))
    assert verdicts(enabled) == {"counts": INCOMPATIBLE}
    assert enabled.stores[0].changes[0].why.startswith("logging enabled: the new changelog starts empty")
    disabled = plan_redeploy(described(store_topology(logged)), described(store_topology(unlogged)))
    assert verdicts(disabled) == {"counts": KEPT} and disabled.compatible
    assert disabled.orphaned_topics == ["shop-counts-changelog"]


def test_leaving_disk_follows_a_changelog_only():
    assert plan_redeploy(described(store_topology(counts())),
                         described(store_topology(counts(in_memory=True)))).compatible
    unlogged = plan_redeploy(described(store_topology(counts().with_logging_disabled())),
                             described(store_topology(counts(in_memory=True).with_logging_disabled())))
    assert verdicts(unlogged) == {"counts": INCOMPATIBLE}
    assert unlogged.stores[0].changes[0].text() == ("persistent RocksDB -> in memory: without a changelog, the state "
                                                    "does not move between the two")


def grouped_count(by_letter):
    builder = StreamsBuilder()
    stream = builder.stream("orders")
    grouped = stream.group_by(lambda key, value: value[:1]) if by_letter else stream.group_by_key()
    grouped.count(Materialized.as_("counts")).to_stream().to("totals")
    return builder.build()


def test_repartition_topics_new_dropped_and_resized():
    recorded, new = described(grouped_count(by_letter=False)), described(grouped_count(by_letter=True))
    added = plan_redeploy(recorded, new)
    [topic] = added.repartition_topics
    assert topic.verdict == NEW and topic.topic.startswith(f"{APP}-") and topic.topic.endswith("-repartition")
    assert f"repartition topic {topic.topic} (4 partitions): new" in added.text()
    removed = plan_redeploy(new, recorded)
    assert [t.verdict for t in removed.repartition_topics] == [DROPPED]
    assert removed.orphaned_topics == [topic.topic]
    resized = plan_redeploy(new, described(grouped_count(by_letter=True), partitions=8))
    assert [t.verdict for t in resized.repartition_topics] == [INCOMPATIBLE] and not resized.compatible
    assert "has 4 partitions, the topology needs 8 (start refuses it)" in resized.text()


def test_input_and_output_topics_added_and_removed():
    plan = plan_redeploy(described(store_topology(counts())),
                         described(store_topology(counts(), source="orders-v2", sink="totals-v2")))
    document = plan.to_json_dict()
    assert document["sources"] == {"added": ["orders-v2"], "removed": ["orders"]}
    assert document["sinks"] == {"added": ["totals-v2"], "removed": ["totals"]}
    assert "input topics added: orders-v2\ninput topics no longer read: orders" in plan.text()
