"""Task-level machinery shared by the TopologyTestDriver and the Kafka-backed runtime.

- ``task.py``: StreamTask, one partition of one subtopology (lifecycle, processing,
  punctuation, commit hooks)
- ``partition_group.py``: per-partition record queues, smallest-timestamp-first choice,
  stream time, task idling
- ``record_collector.py``: how records leave a task (sinks, changelogs, dead letters)
- ``processor_context.py`` / ``processor_node.py``: what processors see and the node graph
- ``state_manager.py``: a task's stores (byte store, changelogging, typed view),
  restoration entry points and the checkpoint
- ``store_builders.py``: ``Stores`` and the store builders topologies hold
- ``typed_stores.py``: serde-typed views of the byte stores
- ``internal_topics.py``: changelog and repartition topics with their configs (SEMANTICS §7)
- ``deserialization.py``: deserialization exception handlers (fail, continue, dead letter)
- ``records.py``: TopicPartition, ConsumedRecord, commit metadata encoding
- ``metrics.py``: per-task counters
- ``serde_resolution.py``: serde objects from names and config defaults
"""
