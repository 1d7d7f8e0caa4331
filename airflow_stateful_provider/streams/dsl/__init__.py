"""The DSL: StreamsBuilder, KStream, KGroupedStream, SessionWindowedKStream, KTable.

A thin layer that writes a :class:`~airflow_stateful_provider.streams.topology.topology.Topology`
with generated node names (``KSTREAM-FILTER-0000000001``, as Kafka Streams names
them, so ``describe()`` output reads the same). Operations:

- ``builder.stream(topics)``, ``builder.table(topic, materialized=...)``
- ``KStream``: filter, filter_not, map_values, map, select_key, peek, foreach, to,
  process, group_by_key, group_by, join / left_join with a KTable
- ``KGroupedStream``: count, reduce, aggregate, windowed_by(SessionWindows)
- ``SessionWindowedKStream``: emit_strategy, count, reduce, aggregate (docs/semantics.md §4)
- ``KTable``: to_stream

A key change (map, select_key, group_by) followed by a stateful operation goes
through an internal repartition topic ``<application_id>-<name>-repartition``, which
starts a new subtopology, so records with equal keys meet in one task.

Modules, from the user's entry point down: ``builder`` (StreamsBuilder), ``streams`` (the
four chained abstractions), ``parameters`` and ``materialized`` (Consumed, Produced, Grouped,
Joined; Materialized and the store it builds), ``internal_builder`` (the topology under
construction and its node names), and the processors the DSL wires in:
``stateless_processors``, ``table_processors``, ``aggregate_processors`` (with ``change``
and ``dropped`` that they share). KStream, KGroupedStream, SessionWindowedKStream and KTable
share one module because they create each other in a loop (a stream groups into a table, a
table turns back into a stream): in separate modules that loop would be an import circle.
"""
