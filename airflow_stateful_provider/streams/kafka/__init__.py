"""The door to kafka-python: the one package of the engine that knows how kafka-python works inside.

The engine talks to Kafka through kafka-python's public API (``KafkaConsumer``,
``KafkaProducer``, ``KafkaAdminClient``, ``kafka.errors``, ``kafka.structs``,
``kafka.admin``). Where that is not enough (a missing call, a bug the engine works around,
a hot path kafka-python makes slow) the engine reaches into kafka-python's internals, and
only here, each time behind a small named function whose docstring says which kafka-python
version it was checked against (3.0.12) and why the engine needs it. Upgrading kafka-python
means re-checking this package, not the engine: tests/unit/test_kafka_door.py fails when a
private kafka-python name is used anywhere else in the provider.

- ``clients``: constructing clients that do not leak their IO thread when they fail.
- ``client_settings``: which settings exist for which client, and of which type.
- ``assignor_api``: the classes a partition assignor implements and returns.
- ``group_join``: the group coordinator: pending rejoins, requested rebalances, joins kept.
- ``batch_decoding``: fetched record batches decoded in one pass.
- ``list_offsets``: a consumer's offset look-ups that follow a partition leader that moved.
- ``net_client``: the network client every client is built with, from the five below.
- ``failed_metadata_refresh``: a failed metadata refresh retried, never fatal and never the end
  of a client's metadata updates.
- ``metadata_requests``: metadata of a topic a client does not know yet requested at once, and
  a pending update not signalled again (no sender spinning on a partition without a leader).
- ``connection_delay``: a producer waits for a broker it cannot send to yet, without spinning.
- ``heartbeat_in_flight``: a consumer's poll waits for records while a heartbeat is unanswered,
  without spinning.
- ``unregistered_sockets``: a selector whose "not registered" answers cost no system calls.
- ``response_classes``: kafka-python's table of response classes kept intact when client threads
  decode their first answers of an API version at once.
- ``parked_fetches``: fetched records of a paused partition handed back.
- ``positions``: a consumer's position, read without a network call.
- ``transactional_calls``: transactional calls that wait at most a bound, and requests kept
  when a coordinator goes away.
- ``producer_close``: a producer closed stops, whether or not what it holds was delivered.
- ``batched_send``: many records for one partition appended to the producer at once.

The stores, the topology, the DSL and the snapshots never import it; nor do the modules the
Airflow side loads to read a status or send a command (tests/unit/test_layers.py).
"""
