"""Changelog loss (restoration/changelog_loss.py): what is a loss and what is not, and what
the ChangelogReader does with each under both ``on_changelog_loss`` values."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import OffsetOutOfRangeError

from airflow_stateful_provider.streams import ChangelogLostError, ConfigError, StreamsConfig
from airflow_stateful_provider.streams.restoration import stalls
from airflow_stateful_provider.streams.restoration.changelog_loss import (
    LostChangelog,
    Verdict,
    changelog_lost_error,
    judge_changelog,
)
from airflow_stateful_provider.streams.restoration.changelog_reader import ChangelogReader
from airflow_stateful_provider.streams.state.common.checkpoint import OffsetCheckpoint
from airflow_stateful_provider.streams.state.common.metadata import METADATA_FILE_NAME
from airflow_stateful_provider.streams.task_id import TaskId

TOPIC = "app-counts-changelog"


@pytest.mark.parametrize("next_offset, start, end, deletes_by_time, high_watermark, verdict", [
    (50, 0, 50, False, None, Verdict.RESTORE),     # at the end: nothing to restore
    (20, 0, 50, False, None, Verdict.RESTORE),     # the tail after the checkpoint
    (0, 0, 0, False, None, Verdict.RESTORE),       # an empty changelog, nothing claimed beyond it
    (50, 0, 0, False, None, Verdict.LOST),         # deleted and recreated empty
    (50, 0, 30, False, None, Verdict.LOST),        # truncated below the checkpoint
    (50, 0, 30, True, None, Verdict.LOST),         # ... whatever the cleanup policy
    (10, 40, 90, True, None, Verdict.REPLAY),      # retention of a compact,delete changelog
    (10, 40, 90, False, None, Verdict.LOST),       # records deleted from a compact-only changelog
    (0, 40, 90, False, None, Verdict.REPLAY),      # ... but a store at offset 0 held none of them
    (50, 0, 45, False, 52, Verdict.RESTORE),       # exactly-once: past the last stable offset, inside the log
    (50, 0, 45, False, 48, Verdict.LOST),          # exactly-once: past the log end too
])
def test_what_is_a_loss(next_offset, start, end, deletes_by_time, high_watermark, verdict):
    assert judge_changelog(next_offset, start, end, deletes_by_time=deletes_by_time,
                           high_watermark=high_watermark) is verdict


def test_the_error_names_task_store_partition_offsets_directory_and_fix():
    lost = [LostChangelog("0_1", "active", "counts", TOPIC, 1, 49, 0, 0, "/state/app/0_1"),
            LostChangelog("0_2", "standby", "counts", TOPIC, 2, 99, 0, 7, "/state/app/0_2")]
    error = changelog_lost_error(lost)
    assert isinstance(error, ChangelogLostError) and error.lost == tuple(lost)
    message = str(error)
    assert ("task 0_1 (active) store 'counts' holds app-counts-changelog-1 up to offset 49, but that changelog "
            "partition now starts at offset 0 and ends at 0") in message
    assert ("task 0_2 (standby) store 'counts' holds app-counts-changelog-2 up to offset 99, but that changelog "
            "partition now starts at offset 0 and ends at 7") in message
    assert "directory (/state/app/0_1, /state/app/0_2) was left as it is" in message
    assert "start once with on_changelog_loss='restore_from_changelog'" in message
    assert "move the task directory aside" in message and "docs/runbook.md" in message


def test_on_changelog_loss_takes_the_two_responses_only():
    base = {"application_id": "app", "bootstrap_servers": "localhost:9092"}
    assert StreamsConfig(**base).on_changelog_loss == "fail"
    assert StreamsConfig(**base, on_changelog_loss="restore_from_changelog").on_changelog_loss == \
        "restore_from_changelog"
    with pytest.raises(ConfigError, match=r"on_changelog_loss must be one of \['fail', 'restore_from_changelog'\], "
                                          r"got 'wipe'"):
        StreamsConfig(**base, on_changelog_loss="wipe")


# ---------------------------------------------------------------------------- the reader


class Consumer:
    """A restore consumer over one changelog: its offsets now, and a poll that may fail."""

    def __init__(self, begin: int, end: int) -> None:
        self.begin, self.end = begin, end
        self.positions: dict[KafkaTopicPartition, int] = {}
        self.poll_error: Exception | None = None

    def beginning_offsets(self, tps):
        return {tp: self.begin for tp in tps}

    def end_offsets(self, tps):
        return {tp: self.end for tp in tps}

    def assign(self, tps):
        self.positions = {tp: self.positions.get(tp, 0) for tp in tps}

    def seek(self, tp, offset):
        self.positions[tp] = offset

    def resume(self, *tps):
        pass

    def pause(self, *tps):
        pass

    def position(self, tp):
        return self.positions[tp]

    def poll(self, timeout_ms=0, max_records=0):
        if self.poll_error is not None:
            raise self.poll_error
        return {}


class Stores:
    """The task's state manager as the reader uses it; records wipes."""

    def __init__(self, checkpoint: int | None, *, deletes_by_time: bool = False, partition: int = 0) -> None:
        self.partition = partition
        self.checkpoint_offset = checkpoint
        self.deletes_by_time = deletes_by_time
        self.task_dir = f"/state/app/0_{partition}"
        self.wiped: list[str] = []

    def changelog_partitions(self):
        return {"counts": (TOPIC, self.partition)}

    def checkpointed_offsets(self):
        return {} if self.checkpoint_offset is None else {(TOPIC, self.partition): self.checkpoint_offset}

    def changelog_deletes_by_time(self, name):
        return self.deletes_by_time

    def wipe_store(self, name):
        self.wiped.append(name)
        self.checkpoint_offset = None

    def restore(self, partition, records):
        return len(records)

    def checkpoint(self, offsets, force=False):
        pass


def test_a_checkpoint_beyond_the_changelog_fails_and_leaves_the_store_as_it_is():
    reader = ChangelogReader(Consumer(0, 0))
    stores = Stores(checkpoint=49)
    with pytest.raises(ChangelogLostError) as failed:
        reader.register(TaskId(0, 0), stores)
    assert failed.value.lost == (LostChangelog("0_0", "active", "counts", TOPIC, 0, 49, 0, 0, "/state/app/0_0"),)
    assert reader.lost_tasks == {TaskId(0, 0): failed.value.lost}
    assert stores.wiped == [] and stores.checkpoint_offset == 49
    assert reader.restoring_tasks == set() and reader.progress() == []  # not registered


def test_a_standby_is_judged_the_same_way():
    reader = ChangelogReader(Consumer(0, 10))
    with pytest.raises(ChangelogLostError, match=r"task 0_0 \(standby\) store 'counts' holds .* up to offset 49"):
        reader.register_standby(TaskId(0, 0), Stores(checkpoint=49))
    assert reader.lost_tasks[TaskId(0, 0)][0].role == "standby" and reader.standby_tasks == set()


def test_opted_in_the_store_is_wiped_and_rebuilt_from_what_the_changelog_holds():
    reader = ChangelogReader(Consumer(0, 5), on_changelog_loss="restore_from_changelog")
    stores = Stores(checkpoint=49)
    assert reader.register(TaskId(0, 0), stores) is False  # 0..4 to restore
    assert stores.wiped == ["counts"] and reader.lost_tasks == {}
    (state,) = reader.progress()
    assert (state.start_offset, state.position, state.end_offset) == (0, 0, 5)


@pytest.mark.parametrize("on_changelog_loss", ["fail", "restore_from_changelog"])
def test_retention_below_the_checkpoint_replays_a_compact_delete_changelog_under_either_setting(on_changelog_loss):
    reader = ChangelogReader(Consumer(40, 90), on_changelog_loss=on_changelog_loss)
    stores = Stores(checkpoint=9, deletes_by_time=True)
    assert reader.register(TaskId(0, 0), stores) is False
    assert stores.wiped == ["counts"]
    assert reader.progress()[0].position == 40


def test_records_deleted_from_a_compact_only_changelog_are_a_loss():
    with pytest.raises(ChangelogLostError, match=r"up to offset 9, but that changelog partition now starts at offset "
                                                 r"40 and ends at 90"):
        ChangelogReader(Consumer(40, 90)).register(TaskId(0, 0), Stores(checkpoint=9))


def test_exactly_once_a_checkpoint_past_the_last_stable_offset_inside_the_log_is_restored():
    asked: list = []

    def log_end_offsets(tps):
        asked.append(list(tps))
        return {tp: 52 for tp in tps}

    reader = ChangelogReader(Consumer(0, 45), log_end_offsets=log_end_offsets)  # 45: the last stable offset
    stores = Stores(checkpoint=49)
    # not lost, and restored up to the log end: the transaction open at 50-51 may be a commit
    # whose markers are on their way (the restore consumer reads it once it is settled)
    assert reader.register(TaskId(0, 0), stores) is False
    assert stores.wiped == [] and asked == [[KafkaTopicPartition(TOPIC, 0)]]
    (state,) = reader.progress()
    assert (state.start_offset, state.position, state.end_offset) == (50, 50, 52)
    reader = ChangelogReader(Consumer(0, 45), log_end_offsets=lambda tps: {tp: 48 for tp in tps})
    with pytest.raises(ChangelogLostError):
        reader.register(TaskId(0, 0), Stores(checkpoint=49))


def test_a_position_out_of_range_while_reading_is_judged_like_a_checkpoint():
    consumer = Consumer(0, 100)
    reader = ChangelogReader(consumer)
    stores = Stores(checkpoint=59)
    assert reader.register(TaskId(0, 0), stores) is False
    consumer.begin = consumer.end = 0  # the changelog was recreated under the reader
    consumer.poll_error = OffsetOutOfRangeError({KafkaTopicPartition(TOPIC, 0): 60})
    with pytest.raises(ChangelogLostError, match=r"holds app-counts-changelog-0 up to offset 59, but that changelog "
                                                 r"partition now starts at offset 0 and ends at 0"):
        reader.poll()
    assert stores.wiped == [] and TaskId(0, 0) in reader.lost_tasks

    consumer = Consumer(0, 100)
    reader = ChangelogReader(consumer, on_changelog_loss="restore_from_changelog")
    stores = Stores(checkpoint=59)
    reader.register(TaskId(0, 0), stores)
    consumer.begin = consumer.end = 0
    consumer.poll_error = OffsetOutOfRangeError({KafkaTopicPartition(TOPIC, 0): 60})
    assert reader.poll() == {}
    assert stores.wiped == ["counts"] and reader.progress()[0].position == 0
    assert consumer.positions[KafkaTopicPartition(TOPIC, 0)] == 0


def test_an_active_restoration_that_stands_still_is_reported_once_per_standstill(caplog):
    now = [0.0]
    reader = ChangelogReader(Consumer(0, 45), log_end_offsets=lambda tps: {tp: 52 for tp in tps},
                             clock=lambda: now[0])
    assert reader.register(TaskId(0, 0), Stores(checkpoint=None)) is False  # 0..51: up to the log end
    tp = KafkaTopicPartition(TOPIC, 0)
    with caplog.at_level(logging.WARNING, logger=stalls.__name__):
        for moment in (0.0, 29.0):
            now[0] = moment
            reader.restore()
        assert caplog.messages == []
        for moment in (30.0, 100.0):
            now[0] = moment
            reader.restore()
        reader.apply({tp: [SimpleNamespace(offset=offset, key=b"k", value=b"v") for offset in range(45)]})
        now[0] = 129.0
        reader.restore()
        now[0] = 130.0
        reader.restore()
    assert caplog.messages == [
        f"task 0_0: restoring {TOPIC}-0 has not moved for 30 s at offset {offset} of 52: a transaction is open "
        "on the changelog there (committed records only are read: the task waits until it is committed, or "
        "aborted by its producer's successor or by the transaction coordinator within the transaction timeout)"
        for offset in (0, 45)]

    caplog.clear()
    reader = ChangelogReader(Consumer(0, 10), clock=lambda: now[0])  # at-least-once: no open transaction to blame
    reader.register(TaskId(0, 0), Stores(checkpoint=None))
    with caplog.at_level(logging.WARNING, logger=stalls.__name__):
        reader.restore()
        now[0] += 30
        reader.restore()
    assert caplog.messages == [f"task 0_0: restoring {TOPIC}-0 has not moved for 30 s at offset 0 of 10: no "
                               "records arrive (is the partition's leader reachable?)"]


def test_exactly_once_local_state_checkpointed_past_the_last_stable_offset_is_kept(tmp_path):
    """With snapshots configured, local state is judged against the changelog before the stores
    open: under exactly-once up to the log end, so a store checkpointed inside a transaction
    not yet settled stays, and no older snapshot replaces it."""
    task_dir = tmp_path / "0_0"
    (task_dir / "counts").mkdir(parents=True)
    (task_dir / "counts" / METADATA_FILE_NAME).write_text("{}")
    OffsetCheckpoint.in_task_dir(str(task_dir)).write({(TOPIC, 0): 49})

    class NoSnapshotWanted:
        def load_newest_valid(self, *args):
            raise AssertionError("the local state is usable: no snapshot should be looked for")

    state_manager = SimpleNamespace(claim_task_dir=lambda: None, persistent_changelogs=lambda: {"counts": (TOPIC, 0)},
                                    task_dir=str(task_dir))
    reader = ChangelogReader(Consumer(0, 45), snapshot_loader=NoSnapshotWanted(),  # 45: the last stable offset
                             log_end_offsets=lambda tps: {tp: 52 for tp in tps})
    assert reader.prepare_stores(TaskId(0, 0), state_manager).source == "local"
