"""Exactly-once: a task taking over restores everything its previous owner committed, even
while the commit markers of the previous owner's last transaction are still on their way.

A transaction's commit returns once the transaction coordinator has logged it; the markers
that make its records readable ``read_committed`` are written to each partition after that,
one partition at a time. The input offsets of that transaction can therefore already be
stable (the new owner reads them) while the store update on the changelog is not readable
yet. A new owner that restored only up to the changelog's last stable offset would then
start from a store missing that update, and count again from one too few (a failure of the
replicated-cluster test under load fits this: 18 keys of one partition counted the same
number twice; Kafka Streams fixed the same in KAFKA-10167).

The scenario, on one broker: the previous owner's state is the input offset 3 committed for
the group (three records of key ``k`` counted) and the changelog holding count 2 committed,
then count 3 in a transaction whose commit has not reached the changelog. An instance starts
with an empty state directory. Oracle:
- while that transaction is open, the task restores and produces nothing;
- once it commits, the task restores count 3 and counts the fourth input record as 4 (the
  output is exactly ``[4]``, the store holds 4).
"""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from airflow_stateful_provider.streams import KafkaStreams, KafkaStreamsState, StreamsConfig
from tests.integration.counts_input import store_contents
from tests.integration.topologies import json_counts
from tools.kafka.topics import create_topics, produce, read_all
from tools.waits import wait_until

pytestmark = pytest.mark.kafka


class RestoreEvents:
    """What the instance's restore listener heard, in order."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_restore_start(self, partition, store_name, start_offset, end_offset):
        self.events.append(("start", start_offset, end_offset))

    def on_batch_restored(self, partition, store_name, batch_end_offset, num_restored):
        self.events.append(("batch", batch_end_offset, num_restored))

    def on_restore_end(self, partition, store_name, total_restored):
        self.events.append(("end", total_restored))

    def on_restore_suspended(self, partition, store_name, total_restored):
        self.events.append(("suspended", total_restored))


def count(value: int) -> bytes:
    return value.to_bytes(8, "big", signed=True)


def test_a_new_owner_waits_for_the_previous_owners_last_commit_to_reach_the_changelog(bootstrap_servers, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    app, source, sink = f"handover-{suffix}", f"handover-in-{suffix}", f"handover-out-{suffix}"
    changelog = f"{app}-counts-changelog"
    create_topics(bootstrap_servers, {source: 1, sink: 1, changelog: 1},
                  configs={changelog: {"cleanup.policy": "compact"}})
    produce(bootstrap_servers, source, [(b"k", b"{}")] * 4)
    # The previous owner: three records counted and their offsets committed ...
    offsets = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=app, enable_auto_commit=False)
    offsets.commit({TopicPartition(source, 0): OffsetAndMetadata(3, "", -1)})
    offsets.close()
    produce(bootstrap_servers, changelog, [(b"k", count(2))])
    # ... and its last store update in a transaction whose markers are not written yet.
    previous_owner = KafkaProducer(bootstrap_servers=bootstrap_servers, transactional_id=f"previous-owner-{suffix}",
                                   transaction_timeout_ms=120_000)
    previous_owner.init_transactions()
    previous_owner.begin_transaction()
    previous_owner.send(changelog, key=b"k", value=count(3))
    previous_owner.flush()

    config = StreamsConfig(application_id=app, bootstrap_servers=bootstrap_servers, state_dir=str(tmp_path),
                           processing_guarantee="exactly_once_v2", commit_interval_ms=100)
    streams = KafkaStreams(json_counts(source, sink), config)
    restore = RestoreEvents()
    streams.set_global_state_restore_listener(restore)
    streams.start()
    try:
        wait_until(lambda: restore.events or streams.state is KafkaStreamsState.ERROR, 60,
                   "the task's restoration to start", lambda: f"state {streams.state}")
        assert restore.events[0] == ("start", 0, 2), restore.events  # up to the log end, open transaction included
        wait_until(lambda: ("batch", 0, 1) in restore.events, 60, "count 2 restored",
                   lambda: f"state {streams.state}, restore {restore.events}")
        # read up to the last stable offset: waiting there for the open transaction, not done
        assert not any(event[0] == "end" for event in restore.events), restore.events
        assert read_all(bootstrap_servers, sink) == []
        previous_owner.commit_transaction()
        wait_until(lambda: read_all(bootstrap_servers, sink) or streams.state is KafkaStreamsState.ERROR, 60,
                   "the fourth record's count", lambda: f"state {streams.state}, restore {restore.events}")
        assert ("end", 2) in restore.events, restore.events
        assert [(r.key, r.value) for r in read_all(bootstrap_servers, sink)] == [(b"k", count(4))]
    finally:
        streams.close(timeout=30)
        previous_owner.close(timeout=5)
    assert store_contents(str(tmp_path), app, 1) == {0: {b"k": count(4)}}
