"""A checkpoint never claims more than a kill -9 leaves in the stores.

RocksDB stores are written without the write-ahead log (the changelog is the durability
source), so restored records live in the memtable until a flush. A checkpoint written
after a restoration (or by a standby) claims those records: the state manager must make
them durable first, or a kill -9 leaves a checkpoint ahead of the data and the lost
records are never restored again."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SETUP = """
import collections, os
from airflow_stateful_provider.streams import StreamsConfig, Stores, Topology
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topic_partition import TopicPartition

class NoProducer:
    def send(self, *a, **k): raise AssertionError("restoring must not produce")
    def flush(self, timeout=None): pass
    def partitions_for(self, topic): return {{0}}

class Pass:
    def init(self, context): pass
    def process(self, record): pass
    def close(self): pass

topology = Topology()
topology.add_source("source", "in")
topology.add_processor("p", Pass, "source")
topology.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("kv"), "bytes", "bytes"), "p")
config = StreamsConfig(application_id="app", bootstrap_servers="localhost:9092", state_dir={state_dir!r},
                       processing_guarantee={guarantee!r})
manager = TaskStateManager(TaskId(0, 0), topology, config, record_collector=RecordCollector(NoProducer()))
manager.initialize()
changelog = TopicPartition("app-kv-changelog", 0)
Record = collections.namedtuple("Record", "key value offset")
"""


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_a_checkpoint_after_restoring_survives_kill_9(tmp_path, guarantee):
    setup = SETUP.format(state_dir=str(tmp_path), guarantee=guarantee)
    writer = setup + textwrap.dedent("""
        manager.restore(changelog, [Record(b"k%d" % i, b"v%d" % i, i) for i in range(500)])
        manager.checkpoint({}, force=True)   # what the changelog reader does when a restoration ends
        os._exit(9)                           # kill -9: no close, no flush
    """)
    done = subprocess.run([sys.executable, "-c", writer], capture_output=True, text=True)
    assert done.returncode == 9, done.stderr
    reader = setup + textwrap.dedent("""
        store = manager.raw_store("kv")
        print(manager.checkpointed_offsets().get(changelog), sum(1 for _ in store.all()))
        manager.close()
    """)
    read = subprocess.run([sys.executable, "-c", reader], capture_output=True, text=True)
    assert read.returncode == 0, read.stderr
    checkpointed, rows = read.stdout.split()
    assert (checkpointed, rows) == ("499", "500"), f"checkpoint {checkpointed} but {rows} rows survived"
