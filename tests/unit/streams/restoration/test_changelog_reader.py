"""ChangelogReader against a fake restore consumer that buffers fetched batches the way
kafka-python 3.0.12's Fetcher does (docs/semantics.md §2: standbys yield to restoration but still move)."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from kafka import TopicPartition as KafkaTopicPartition

from airflow_stateful_provider.streams.restoration.changelog_reader import MAX_POLL_RECORDS, ChangelogReader
from airflow_stateful_provider.streams.task_id import TaskId

TOPIC = "app-counts-changelog"


class _Batch:
    """A fetched batch; like kafka-python's PartitionRecords it is falsy once used up."""

    def __init__(self, tp: KafkaTopicPartition, records: list) -> None:
        self.tp, self.records = tp, deque(records)

    def __bool__(self) -> bool:
        return bool(self.records)


class BufferingConsumer:
    """A restore consumer over in-memory partitions, ``batch`` records per fetch.

    ``poll`` follows kafka-python 3.0.12's ``Fetcher.fetched_records``: batches are returned
    in order; one cut by ``max_records`` stays in the in-line slot for the next poll; the
    in-line batch of a partition found paused is parked, and a parked batch is handed back
    after ``resume`` only when the in-line slot is None (a used-up batch stays in the slot);
    a partition with a parked batch is not fetched.
    """

    def __init__(self, ends: dict[int, int], batch: int) -> None:
        self.logs = {KafkaTopicPartition(TOPIC, p): end for p, end in ends.items()}
        self.batch = batch
        self.assigned: dict[KafkaTopicPartition, int] = {}
        self.paused_set: set[KafkaTopicPartition] = set()
        self.completed: deque[_Batch] = deque()
        self.inline: _Batch | None = None
        self.parked: dict[KafkaTopicPartition, _Batch] = {}
        self.polls: list[tuple[set[int], dict[int, int]]] = []  # (paused, records returned) per poll

    # offsets
    def end_offsets(self, tps):
        return {tp: self.logs[tp] for tp in tps}

    def beginning_offsets(self, tps):
        return {tp: 0 for tp in tps}

    def highwater(self, tp):
        return self.logs[tp]

    def position(self, tp):
        return self.assigned[tp]

    # assignment
    def assign(self, tps):
        self.assigned = {tp: self.assigned.get(tp, 0) for tp in tps}
        self.paused_set &= set(tps)

    def seek(self, tp, offset):
        self.assigned[tp] = offset

    def pause(self, *tps):
        self.paused_set.update(tps)

    def resume(self, *tps):
        self.paused_set.difference_update(tps)

    def paused(self):
        return set(self.paused_set)

    # fetching
    def _fetch(self) -> None:
        busy = {b.tp for b in self.completed} | set(self.parked) | ({self.inline.tp} if self.inline else set())
        for tp, position in self.assigned.items():
            if tp in self.paused_set or tp in busy or position >= self.logs[tp]:
                continue
            end = min(position + self.batch, self.logs[tp])
            self.completed.append(_Batch(tp, [SimpleNamespace(offset=o, key=b"k%d" % o, value=b"v")
                                              for o in range(position, end)]))

    def poll(self, timeout_ms=0, max_records=500):
        fetched = self._fetched_records(max_records)
        if not fetched:
            self._fetch()
            fetched = self._fetched_records(max_records)
        self.polls.append(({tp.partition for tp in self.paused_set},
                           {tp.partition: len(r) for tp, r in fetched.items()}))
        return fetched

    def _fetched_records(self, max_records: int) -> dict:
        for tp in [tp for tp in self.parked if tp not in self.paused_set]:
            if self.inline is None:  # the kafka-python 3.0.12 condition: a used-up batch is not None
                self.inline = self.parked.pop(tp)
        drained: dict = {}
        remaining = max_records
        while remaining > 0:
            if not self.inline:
                if not self.completed:
                    break
                self.inline = self.completed.popleft()
            elif self.inline.tp in self.paused_set:
                self.parked[self.inline.tp], self.inline = self.inline, None
            elif self.inline.tp not in self.assigned or self.inline.records[0].offset != self.assigned[self.inline.tp]:
                self.inline.records.clear()  # unassigned or sought elsewhere: dropped
            else:
                taken = [self.inline.records.popleft() for _ in range(min(remaining, len(self.inline.records)))]
                drained.setdefault(self.inline.tp, []).extend(taken)
                self.assigned[self.inline.tp] = taken[-1].offset + 1
                remaining -= len(taken)
        return drained


class FakeStores:
    def __init__(self, partition: int) -> None:
        self.partition, self.applied = partition, 0

    def changelog_partitions(self):
        return {"counts": (TOPIC, self.partition)}

    def checkpointed_offsets(self):
        return {}

    def restore(self, partition, records):
        self.applied += len(records)
        return len(records)

    def checkpoint(self, offsets, force=False):
        pass


def test_a_standby_paused_in_the_middle_of_a_batch_still_catches_up():
    """A standby's batch cut by max_records must not be paused: the consumer would park its
    rest and never fetch the partition again (the standby stalled at that offset for good)."""
    ends = {0: 40_000, 1: 40_000}
    consumer = BufferingConsumer(ends, batch=MAX_POLL_RECORDS * 7 // 10)
    reader = ChangelogReader(consumer)
    active, standby = FakeStores(0), FakeStores(1)
    assert reader.register(TaskId(0, 0), active) is False
    reader.register_standby(TaskId(0, 1), standby)

    restored: list[TaskId] = []
    for _ in range(100):
        restored += reader.restore()
        if restored and standby.applied == ends[1]:
            break
    assert restored == [TaskId(0, 0)] and active.applied == ends[0]
    assert standby.applied == ends[1], (standby.applied, consumer.polls)
    assert [s.position for s in reader.progress()] == [ends[1]] and not consumer.parked
    # ... and the standby still yielded to the restoring active on some polls.
    assert any(1 in paused for paused, _ in consumer.polls[:-1])


def test_a_standby_promoted_while_standbys_are_paused_restores_at_once():
    """Promotion happens between polls, possibly while standby partitions are paused for a
    restoring active; the promoted partition must be fetched from the next poll on."""
    ends = {0: 200_000, 1: 30_000}
    consumer = BufferingConsumer(ends, batch=2_000)
    reader = ChangelogReader(consumer)
    active, standby = FakeStores(0), FakeStores(1)
    reader.register(TaskId(0, 0), active)
    reader.register_standby(TaskId(0, 1), standby)
    reader.restore()
    reader.restore()  # the second poll of the turn: standbys paused
    assert KafkaTopicPartition(TOPIC, 1) in consumer.paused()

    assert reader.promote(TaskId(0, 1)) is False
    assert KafkaTopicPartition(TOPIC, 1) not in consumer.paused()
    restored: list[TaskId] = []
    for _ in range(40):
        restored += reader.restore()
        if TaskId(0, 1) in restored:
            break
    assert TaskId(0, 1) in restored and TaskId(0, 0) not in restored  # the promoted one did not wait for 0_0
    assert standby.applied == ends[1]


class RecordingListener:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_restore_start(self, partition, store_name, start_offset, end_offset):
        self.calls.append(("start", partition[1], start_offset, end_offset))

    def on_batch_restored(self, partition, store_name, batch_end_offset, num_restored):
        self.calls.append(("batch", partition[1], batch_end_offset, num_restored))

    def on_restore_end(self, partition, store_name, total_restored):
        self.calls.append(("end", partition[1], total_restored))

    def on_restore_suspended(self, partition, store_name, total_restored):
        self.calls.append(("suspended", partition[1], total_restored))


def test_restoration_is_announced_when_the_reader_starts_reading_the_partition():
    """on_restore_start comes with the first poll (Kafka Streams' StoreChangelogReader calls it
    when it starts reading), not at registration while other tasks are still being set up; a
    task unregistered before that poll gets no restore callbacks at all."""
    consumer = BufferingConsumer({0: 3_000, 1: 3_000, 2: 3_000}, batch=2_000)
    listener = RecordingListener()
    reader = ChangelogReader(consumer, listener)
    for partition in (0, 1, 2):
        assert reader.register(TaskId(0, partition), FakeStores(partition)) is False
    reader.unregister(TaskId(0, 2))
    assert listener.calls == [] and consumer.polls == []

    completed = reader.restore()
    assert listener.calls[:2] == [("start", 0, 0, 3_000), ("start", 1, 0, 3_000)]
    while len(completed) < 2:
        completed += reader.restore()
    assert sorted(completed) == [TaskId(0, 0), TaskId(0, 1)]
    assert [c for c in listener.calls if c[0] == "end"] == [("end", 0, 3_000), ("end", 1, 3_000)]
    assert not any(c[1] == 2 for c in listener.calls)
