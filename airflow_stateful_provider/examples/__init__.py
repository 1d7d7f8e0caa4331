"""Example pipelines shipped with the provider, runnable with the streams runner and on Spark.

- :mod:`~airflow_stateful_provider.examples.clicks_and_payments`: the topology
  (``build_topology(config)``): click sessions per user, payments priced in USD as of
  their event time (docs/example-pipeline.md).
- :mod:`~airflow_stateful_provider.examples.generator`: deterministic input data and a
  producer/CLI for a real broker.
- :mod:`~airflow_stateful_provider.examples.expected`: what the topology must output for
  generated data (an independent oracle), and a reader of the output topics.
"""
