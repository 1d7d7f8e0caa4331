"""Processing: one task and a record's way through it.

Records from the consumer are buffered per partition (``partition_group``), deserialized
(``deserialization``), chosen smallest-timestamp-first and handed to the task's source node;
processor nodes (``processor_node``) call the user's processors through the processor context
(``processor_context``), which reaches the task's stores (``state_manager``); sinks and
changelogs leave through the record collector (``record_collector``). Punctuation, commit
metadata and per-task metrics live here too. Used by the Kafka runtime and by the
TopologyTestDriver alike; it knows nothing of consumer groups or of the instance.
"""
