"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from airflow_stateful_provider import __version__


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-stateful-provider",
        "name": "Stateful Streams",
        "description": "Stateful stream pipelines (Kafka Streams semantics, RocksDB state) on Spark.",
        "versions": [__version__],
    }
