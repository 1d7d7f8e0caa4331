"""Apache Airflow provider for stateful stream pipelines.

The engine (``airflow_stateful_provider.streams``) has Kafka Streams semantics, keeps
state in RocksDB with Kafka changelogs, and runs on Spark; the Airflow surface submits
topologies, watches restoration and standby lag, and runs store maintenance.
"""

from __future__ import annotations

__version__ = "0.1.0"
