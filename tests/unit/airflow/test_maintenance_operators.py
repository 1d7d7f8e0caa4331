"""The maintenance operators without a broker: arguments and templating, the online outcome
handling against a fake hook (complete, failed, missing, nobody live), offline mode on real
RocksDB store directories in tmp_path, and the changelog config check against a fake admin
client (dry run, repair, manual findings)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_stateful_provider.operators.maintenance import (
    ChangelogConfigOperator,
    StoreCompactionOperator,
    StoreRetentionOperator,
    parse_now_ms,
    parse_store_names,
    result_table,
)
from airflow_stateful_provider.streams.control.commands import CommandOutcome, new_command
from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.dsl.parameters import Consumed
from airflow_stateful_provider.streams.state.keyvalue import RocksDBKeyValueStore
from airflow_stateful_provider.streams.state.session import RocksDBSessionStore
from airflow_stateful_provider.streams.state.session.key import SessionKey
from airflow_stateful_provider.streams.state.store_dir import open_store
from airflow_stateful_provider.streams.state.versioned.rocksdb import RocksDBVersionedKeyValueStore
from airflow_stateful_provider.streams.status.document_parts import CommandAcknowledgement
from airflow_stateful_provider.streams.windows import SessionWindows
from tests.unit.streams.status.status_documents import APP, NOW_MS, document, snapshot, task

HOUR = 3_600_000


# ---------------------------------------------------------------------------- arguments


def test_template_fields():
    assert {"application_id", "stores", "state_dir", "now", "mode"} <= set(StoreRetentionOperator.template_fields)
    assert {"application_id", "stores", "state_dir", "mode"} <= set(StoreCompactionOperator.template_fields)
    assert "now" not in StoreCompactionOperator.template_fields
    assert {"application_id", "topology", "streams_config", "repair"} <= set(ChangelogConfigOperator.template_fields)


@pytest.mark.parametrize(("now", "expected"), [
    (None, 42), ("", 42), (1_700_000_000_000, 1_700_000_000_000), ("1700000000000", 1_700_000_000_000),
    ("2026-01-01T00:00:00Z", 1_767_225_600_000), ("2026-01-01T01:00:00+01:00", 1_767_225_600_000),
    (datetime(2026, 1, 1, tzinfo=UTC), 1_767_225_600_000),
])
def test_now_forms(now, expected):
    assert parse_now_ms(now, wall_clock_ms=42) == expected


@pytest.mark.parametrize(("now", "message"), [
    (datetime(2026, 1, 1), "has no time zone"), ("2026-01-01T00:00:00", "has no time zone"),
    ("yesterday", "'yesterday' is neither epoch milliseconds nor an ISO-8601"), (-5, ">= 0"), (True, "got True"),
    (1.5, "got float 1.5"),
])
def test_bad_now_is_named(now, message):
    with pytest.raises(ValueError, match=message):
        parse_now_ms(now)


def test_store_names():
    assert parse_store_names(None) is None
    assert parse_store_names(" a, b,a ") == ("a", "b")
    assert parse_store_names(["x", "y"]) == ("x", "y")
    with pytest.raises(ValueError, match=r"got \[\]"):
        parse_store_names([])
    with pytest.raises(ValueError, match="non-empty strings"):
        parse_store_names(["a", ""])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"application_id": APP, "mode": "sideways"}, "mode must be one of \\['online', 'offline'\\], got 'sideways'"),
    ({}, "online mode needs application_id"),
    ({"application_id": APP, "state_dir": "/s"}, "state_dir '/s' is only for mode='offline'"),
    ({"application_id": APP, "mode": "offline"}, "offline mode needs state_dir"),
    ({"application_id": APP, "timeout": 0}, "timeout must be >= 0.001 s"),
    ({"application_id": APP, "timeout": "60"}, "timeout must be a number of seconds or a timedelta, got str '60'"),
    ({"application_id": APP, "stores": []}, "stores must name at least one store"),
    ({"application_id": APP, "now": "soon"}, "'soon' is neither"),
])
def test_argument_errors_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StoreRetentionOperator(task_id="retention", **kwargs)


def test_templated_mode_is_checked_when_executed():
    operator = StoreCompactionOperator(task_id="compact", application_id=APP, mode="{{ params.mode }}")
    operator.mode = "sideways"  # as rendered
    with pytest.raises(ValueError, match="got 'sideways'"):
        operator.execute({})


def test_changelog_operator_argument_errors():
    with pytest.raises(ValueError, match="topology must be 'package.module:function', got 'nope'"):
        ChangelogConfigOperator(task_id="c", application_id=APP, topology="nope")
    with pytest.raises(ValueError, match="repair must be True or False, got 'yes'"):
        ChangelogConfigOperator(task_id="c", application_id=APP, repair="yes")
    with pytest.raises(ValueError, match="streams_config must be a mapping"):
        ChangelogConfigOperator(task_id="c", application_id=APP, streams_config=[1])
    ChangelogConfigOperator(task_id="c", application_id=APP, repair="{{ params.repair }}")  # checked once rendered


# ---------------------------------------------------------------------------- online, fake hook


RETENTION_RESULT = {"now_ms": NOW_MS, "observed_stream_time_before": NOW_MS - 2 * HOUR,
                    "observed_stream_time_after": NOW_MS, "min_live_segment": 9,
                    "segments_dropped": [{"segment_id": 3, "start_ms": 0, "end_ms": 1},
                                         {"segment_id": 4, "start_ms": 2, "end_ms": 3}],
                    "bytes_before": 4096, "bytes_after": 2048}


class FakeHook:
    """Status and control as the real hook returns them; acknowledgements scripted per instance."""

    def __init__(self, status, answers: dict) -> None:
        self.status, self.answers = status, answers
        self.sent: list = []
        self.waited: list = []

    def get_status(self, application_id, **kwargs):
        return self.status

    def send_command(self, application_id, command_type, *, instances=None, stores=None, now_ms=None):
        command = new_command(application_id, command_type, instances=instances, stores=stores, now_ms=now_ms)
        self.sent.append(command)
        return command

    def wait_for_command(self, command, *, instances, timeout):
        self.waited.append((tuple(instances), timeout))
        acks = {i: CommandAcknowledgement(command.command_id, status, result, NOW_MS)
                for i, (status, result) in self.answers.items()}
        missing = tuple(i for i in instances if i not in acks or acks[i].status == "accepted")
        return CommandOutcome(command, acks, missing)


def with_hook(operator, hook):
    operator.__dict__["hook"] = hook  # the cached_property's slot
    return operator


TWO_LIVE = snapshot(document("a", task("0_0")), document("b", task("0_1")),
                    document("old", task("0_1", "standby"), published_at=NOW_MS - 600_000))


def test_online_retention_sends_now_to_live_instances_and_returns_rows(capsys):
    hook = FakeHook(TWO_LIVE, {
        "a": ("done", {"stores": [{"task_id": "0_0", "store": "s", "role": "active", "result": RETENTION_RESULT}]}),
        "b": ("done", {"stores": [{"task_id": "0_1", "store": "s", "role": "active", "result": RETENTION_RESULT},
                                  {"task_id": "0_0", "store": "s", "role": "standby", "result": RETENTION_RESULT}]}),
    })
    operator = with_hook(StoreRetentionOperator(task_id="r", application_id=APP, stores="s", now=NOW_MS,
                                                timeout=timedelta(seconds=30)), hook)
    rows = operator.execute({})
    (command,) = hook.sent
    assert (command.command_type, command.stores, command.now_ms) == ("enforce_retention", ("s",), NOW_MS)
    assert hook.waited == [(("a", "b"), timedelta(seconds=30))]  # the stale instance is not waited for
    assert [(r["instance"], r["task_id"], r["role"]) for r in rows] == [
        ("a", "0_0", "active"), ("b", "0_1", "active"), ("b", "0_0", "standby")]
    assert rows[0]["result"] == RETENTION_RESULT
    json.dumps(rows)
    out = capsys.readouterr().out
    assert "stale instance(s) ['old']" in out
    assert "dropped 2 segment(s) (3..4); stream time 2023-11-14 20:13:20 -> 2023-11-14 22:13:20; " \
           "4.0 KiB -> 2.0 KiB" in out


def test_online_failure_names_failed_and_silent_instances_and_what_succeeded():
    hook = FakeHook(TWO_LIVE, {
        "a": ("done", {"stores": [{"task_id": "0_0", "store": "s", "role": "active",
                                   "result": {"bytes_before": 10, "bytes_after": 5, "duration_s": 0.25}}]}),
    })
    three = snapshot(document("a", task("0_0")), document("b", task("0_1")), document("c"))
    hook.status = three
    hook.answers["b"] = ("failed", {"error": "InvalidStoreError: boom"})
    operator = with_hook(StoreCompactionOperator(task_id="c", application_id=APP, timeout=1), hook)
    with pytest.raises(AirflowException) as info:
        operator.execute({})
    message = str(info.value)
    assert "b failed: InvalidStoreError: boom" in message
    assert "no answer within 1s from ['c']" in message
    assert "Succeeded: a (1 store(s))" in message
    assert "10 B -> 5 B (reclaimed 5 B) in 0.25s" in message  # the table of what succeeded
    assert hook.sent[0].now_ms is None and hook.sent[0].command_type == "compact"
    assert hook.waited == [(("a", "b", "c"), timedelta(seconds=1))]  # timeout=1 is a second, not 1 ms


def test_online_without_a_live_instance_sends_nothing():
    hook = FakeHook(snapshot(document("a", state="NOT_RUNNING"), document("b", published_at=NOW_MS - 600_000)), {})
    operator = with_hook(StoreCompactionOperator(task_id="c", application_id=APP), hook)
    with pytest.raises(AirflowException, match=r"no live instance.*'a \(NOT_RUNNING\)', 'b \(RUNNING stale\)'.*"
                                               r"mode='offline'"):
        operator.execute({})
    assert hook.sent == []


def test_result_table():
    rows = [{"instance": "a", "task_id": "0_0", "store": "s", "role": "active",
             "result": {"skipped": "in-memory store: nothing to compact"}},
            {"instance": None, "task_id": "0_1", "store": "kv", "role": None, "result": {"bytes_before": 2048,
                                                                                           "bytes_after": 1024,
                                                                                           "duration_s": 1}}]
    lines = result_table(rows).splitlines()
    assert lines[0].split() == ["INSTANCE", "TASK", "STORE", "ROLE", "RESULT"]
    assert lines[1].split(None, 4) == ["a", "0_0", "s", "active", "skipped: in-memory store: nothing to compact"]
    assert lines[2].split(None, 4) == ["-", "0_1", "kv", "-", "2.0 KiB -> 1.0 KiB (reclaimed 1.0 KiB) in 1.00s"]
    assert result_table([]) == "(no store)"


# ---------------------------------------------------------------------------- offline, real stores


def make_state_dir(root: Path) -> Path:
    """An instance's state dir: tasks 0_0 and 0_1 of APP with a session store "s" holding
    sessions 2 and 1 hours old (retention 6 min), task 0_0 also a versioned store "v" (history
    retention 1 min) with old versions and a key-value store "kv"."""
    app_dir = root / APP
    for task_id in ("0_0", "0_1"):
        store = RocksDBSessionStore(app_dir / task_id / "s", 360_000, name="s")
        for i in range(50):
            store.put(SessionKey(f"k{i}".encode(), NOW_MS - 2 * HOUR, NOW_MS - 2 * HOUR + i), b"1")
            store.put(SessionKey(f"k{i}".encode(), NOW_MS - HOUR, NOW_MS - HOUR + i), b"2")
        store.close()
    versioned = RocksDBVersionedKeyValueStore(app_dir / "0_0" / "v", 60_000, name="v")
    for ts in range(NOW_MS - 2 * HOUR, NOW_MS - HOUR, 600_000):
        versioned.put(b"key", str(ts).encode(), ts)
    versioned.close()
    kv = RocksDBKeyValueStore(app_dir / "0_0" / "kv", name="kv")
    kv.put(b"a", b"1")
    kv.close()
    return root


def stats(path: Path):
    store = open_store(path, read_only=True)
    try:
        return store.stats()
    finally:
        store.close()


def test_offline_retention_drops_expired_segments_and_skips_key_value_stores(tmp_path):
    state_dir = make_state_dir(tmp_path / "state")
    operator = StoreRetentionOperator(task_id="r", application_id=APP, mode="offline", state_dir=str(state_dir),
                                      now=NOW_MS)
    rows = operator.execute({})
    by_store = {(r["task_id"], r["store"]): r for r in rows}
    assert set(by_store) == {("0_0", "kv"), ("0_0", "s"), ("0_0", "v"), ("0_1", "s")}
    assert by_store[("0_0", "kv")]["result"] == {
        "skipped": "keyvalue store: retention and compaction apply to session and versioned stores"}
    for key in (("0_0", "s"), ("0_1", "s"), ("0_0", "v")):
        row = by_store[key]
        assert row["instance"] is None and row["application_id"] == APP
        assert row["result"]["now_ms"] == NOW_MS and row["result"]["segments_dropped"], row
        assert row["result"]["observed_stream_time_after"] == NOW_MS
    json.dumps(rows)
    after = stats(state_dir / APP / "0_1" / "s")
    assert after.live_segments == () and after.observed_stream_time == NOW_MS


def test_offline_compaction_with_a_store_filter_and_no_application_id(tmp_path):
    state_dir = make_state_dir(tmp_path / "state")
    rows = StoreCompactionOperator(task_id="c", mode="offline", state_dir=str(state_dir), stores=["s"]).execute({})
    assert [(r["task_id"], r["store"]) for r in rows] == [("0_0", "s"), ("0_1", "s")]
    assert all(r["result"]["bytes_after"] > 0 and r["result"]["duration_s"] >= 0 for r in rows)


def test_offline_unknown_or_key_value_store_names_list_the_available_stores(tmp_path):
    state_dir = make_state_dir(tmp_path / "state")
    operator = StoreCompactionOperator(task_id="c", application_id=APP, mode="offline", state_dir=str(state_dir),
                                       stores="s,nope,kv")
    with pytest.raises(ValueError) as info:
        operator.execute({})
    assert "stores ['nope', 'kv'] are not session or versioned stores" in str(info.value)
    assert "'kv' is a keyvalue store" in str(info.value) and "available: ['s', 'v']" in str(info.value)


def test_offline_unknown_application_names_the_ones_present(tmp_path):
    state_dir = make_state_dir(tmp_path / "state")
    operator = StoreCompactionOperator(task_id="c", application_id="other", mode="offline", state_dir=str(state_dir))
    with pytest.raises(ValueError, match=rf"no directory of application 'other'.*applications there: \['{APP}'\]"):
        operator.execute({})


def test_offline_refuses_a_store_locked_by_a_running_instance_and_changes_nothing(tmp_path):
    state_dir = make_state_dir(tmp_path / "state")
    before = stats(state_dir / APP / "0_0" / "s")
    held = open_store(state_dir / APP / "0_1" / "s")  # as a running instance holds it
    try:
        operator = StoreRetentionOperator(task_id="r", application_id=APP, mode="offline", state_dir=str(state_dir),
                                          now=NOW_MS)
        with pytest.raises(AirflowException) as info:
            operator.execute({})
    finally:
        held.close()
    message = str(info.value)
    assert "store 's' of task 0_1" in message and "locked by a running instance" in message
    assert "mode='online'" in message and "Nothing was changed" in message
    assert stats(state_dir / APP / "0_0" / "s").live_segments == before.live_segments  # opened first, not touched


# ---------------------------------------------------------------------------- changelog configs, fake admin


SESSION_CONFIG = {"cleanup.policy": "compact,delete", "retention.ms": "86760000",
                  "message.timestamp.type": "CreateTime", "min.compaction.lag.ms": "0"}


def session_topology(config) -> StreamsBuilder:
    builder = StreamsBuilder()
    (builder.stream(config.app_configs["input"], Consumed.with_("string", "string")).group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5 * 60_000, 60_000)).count(Materialized.as_("s")))
    return builder


class FakeAdmin:
    """The kafka-python admin calls the operator makes, over topics held in memory."""

    def __init__(self, topics: dict[str, tuple[int, dict]]) -> None:
        self.topics = topics
        self.altered: list = []

    def list_topics(self):
        return list(self.topics)

    def describe_topics(self, names):
        return [{"name": n, "error_code": 0, "partitions": [{}] * self.topics[n][0]} for n in names]

    def describe_configs(self, resources, config_filter):
        assert config_filter == "all"
        return {"topic": {r.name: {k: {"value": v} for k, v in self.topics[r.name][1].items()} for r in resources}}

    def alter_configs(self, resources):
        for resource in resources:
            self.altered.append((resource.name, dict(resource.configs)))
            self.topics[resource.name][1].update(resource.configs)
        return {"topic": {r.name: "OK" for r in resources}}

    def close(self):
        pass


class AdminHook:
    bootstrap_servers = ["broker:9092"]

    def __init__(self, admin):
        self.admin = admin

    def get_admin_client(self, **overrides):
        return self.admin


def changelog_operator(admin, **kwargs) -> ChangelogConfigOperator:
    return with_hook(ChangelogConfigOperator(task_id="changelogs", application_id=APP, **kwargs), AdminHook(admin))


TOPOLOGY = {"topology": "tests.unit.airflow.test_maintenance_operators:session_topology",
            "streams_config": {"app_configs": {"input": "clicks-in"}}}


def test_dry_run_reports_the_drift_and_changes_nothing(capsys):
    admin = FakeAdmin({"clicks-in": (2, {}), f"{APP}-s-changelog": (2, {**SESSION_CONFIG, "retention.ms": "1000"}),
                       f"{APP}-status": (1, {})})
    result = changelog_operator(admin, **TOPOLOGY).execute({})
    assert admin.altered == []
    assert result["checked_topics"] == [f"{APP}-s-changelog"]
    assert [(d["topic"], d["key"], d["expected"], d["actual"], d["repairable"]) for d in result["drift"]] == [
        (f"{APP}-s-changelog", "retention.ms", "86760000", "1000", True)]
    assert result["repaired"] == [] and result["remaining"] == result["drift"]
    assert "dry run: 1 config value(s) drift" in capsys.readouterr().out
    with pytest.raises(AirflowException, match="drift \\(dry run; repair=True fixes them\\)"):
        changelog_operator(admin, fail_on_drift=True, **TOPOLOGY).execute({})


def test_repair_sets_only_the_drifting_keys_and_confirms():
    admin = FakeAdmin({"clicks-in": (2, {}), f"{APP}-s-changelog": (2, {**SESSION_CONFIG, "retention.ms": "1000",
                                                                           "cleanup.policy": "delete"})})
    result = changelog_operator(admin, repair=True, **TOPOLOGY).execute({})
    assert admin.altered == [(f"{APP}-s-changelog", {"cleanup.policy": "compact,delete", "retention.ms": "86760000"})]
    assert len(result["repaired"]) == 2 and result["remaining"] == []


def test_partition_mismatch_fails_and_is_never_repaired():
    admin = FakeAdmin({"clicks-in": (2, {}), f"{APP}-s-changelog": (3, dict(SESSION_CONFIG))})
    with pytest.raises(AirflowException) as info:
        changelog_operator(admin, repair=True, **TOPOLOGY).execute({})
    assert "need manual action" in str(info.value) and "partitions" in str(info.value)
    assert admin.altered == []


def test_without_topology_inferred_checks_and_unchecked_notes():
    admin = FakeAdmin({f"{APP}-s-changelog": (2, dict(SESSION_CONFIG)),
                       f"{APP}-kv-changelog": (2, {"cleanup.policy": "compact",
                                                   "message.timestamp.type": "LogAppendTime"})})
    result = changelog_operator(admin, repair=True).execute({})
    assert admin.altered == [(f"{APP}-kv-changelog", {"message.timestamp.type": "CreateTime"})]
    assert any("store retention 360000 ms" in note for note in result["unchecked"])
    admin.topics[f"{APP}-kv-changelog"][1]["cleanup.policy"] = "delete"
    with pytest.raises(AirflowException, match="need manual action"):
        changelog_operator(admin).execute({})


def test_unknown_application():
    with pytest.raises(AirflowException, match=f"unknown application '{APP}'"):
        changelog_operator(FakeAdmin({"x-status": (1, {})})).execute({})


def test_the_retention_summary_reports_rows_segments_bytes_and_changelog_records():
    from airflow_stateful_provider.operators.maintenance_report import result_table

    result = {**RETENTION_RESULT, "rows_before": 120, "rows_after": 40, "segments_before": 3, "segments_after": 1,
              "changelog_records_written": 1}
    line = result_table([{"instance": "a", "task_id": "0_0", "store": "s", "role": "active", "result": result}])
    assert "rows ~120 -> ~40; segments 3 -> 1; 4.0 KiB -> 2.0 KiB; 1 changelog record(s) written" in line
    assert "holding" not in line
    line = result_table([{"instance": "a", "task_id": "0_0", "store": "s", "role": "active",
                          "result": {**result, "rows_dropped": 80}}])
    assert "dropped 2 segment(s) (3..4) holding 80 row(s)" in line
    ttl = {**result, "segments_dropped": [], "min_live_segment": None, "rows_dropped": 7,
           "changelog_records_written": 8}
    line = result_table([{"instance": "a", "task_id": "0_0", "store": "kv", "role": "active", "result": ttl}])
    assert "expired 7 key(s)" in line and "segments" not in line and "8 changelog record(s) written" in line


class FakeProducer:
    def __init__(self, partitions):
        self.partitions, self.sent, self.closed = partitions, [], False

    def partitions_for(self, topic):
        return self.partitions.get(topic)

    def send(self, topic, key=None, value=None, partition=None, timestamp_ms=None):
        self.sent.append((topic, partition, key, json.loads(value)))

        class Done:
            def get(self, timeout=None):
                return None

        return Done()

    def flush(self, timeout=None):
        pass

    def close(self):
        self.closed = True


class ProducingHook:
    def __init__(self, producer):
        self.producer = producer

    def get_producer(self, **overrides):
        return self.producer


def test_offline_retention_can_write_the_cut_off_into_each_changelog(tmp_path):
    from airflow_stateful_provider.streams.state.common.cutoff import SESSION_CUTOFF_KEY, VERSIONED_CUTOFF_KEY

    state_dir = make_state_dir(tmp_path / "state")
    producer = FakeProducer({f"{APP}-s-changelog": {0, 1}})  # "v" has no changelog topic
    operator = with_hook(StoreRetentionOperator(task_id="r", application_id=APP, mode="offline",
                                                state_dir=str(state_dir), now=NOW_MS, write_cutoff=True),
                         ProducingHook(producer))
    rows = {(r["task_id"], r["store"]): r["result"] for r in operator.execute({})}
    marker = {"marker": "retention-cutoff", "format_version": 1, "cutoff_ms": NOW_MS}
    assert sorted(producer.sent) == [(f"{APP}-s-changelog", 0, SESSION_CUTOFF_KEY, marker),
                                     (f"{APP}-s-changelog", 1, SESSION_CUTOFF_KEY, marker)]
    assert VERSIONED_CUTOFF_KEY not in [s[2] for s in producer.sent] and producer.closed
    assert rows[("0_0", "s")]["changelog_records_written"] == rows[("0_1", "s")]["changelog_records_written"] == 1
    versioned = rows[("0_0", "v")]
    assert versioned["changelog_records_written"] == 0 and "marker not written" in versioned["changelog"]


def test_offline_retention_writes_nothing_to_kafka_by_default(tmp_path):
    state_dir = make_state_dir(tmp_path / "state")
    producer = FakeProducer({f"{APP}-s-changelog": {0, 1}})
    operator = with_hook(StoreRetentionOperator(task_id="r", application_id=APP, mode="offline",
                                                state_dir=str(state_dir), now=NOW_MS), ProducingHook(producer))
    rows = operator.execute({})
    assert producer.sent == [] and all(r["result"].get("changelog_records_written", 0) == 0 for r in rows)
