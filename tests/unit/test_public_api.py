"""The one public import path: ``airflow_stateful_provider.streams`` exports (``__all__``)
everything a topology is written, run, tested and watched with, and importing it loads
neither Airflow nor Spark. The documentation's use of it: tests/unit/test_docs.py.
"""

from __future__ import annotations

import subprocess
import sys

import airflow_stateful_provider.streams as streams


def test_the_names_a_user_writes_a_topology_with_are_exported():
    wanted = {"StreamsBuilder", "Topology", "KafkaStreams", "KafkaStreamsState", "StreamsConfig", "Stores",
              "Materialized", "Consumed", "Produced", "Grouped", "Joined", "SessionWindows", "EmitStrategy",
              "Processor", "ProcessorContext", "Record", "PunctuationType", "TopologyTestDriver",
              "StateRestoreListener", "StandbyUpdateListener", "Serdes", "Serde", "fetch_application_status",
              "read_status_documents", "ApplicationStatus", "RestorationProgress", "render_status_table"}
    assert wanted <= set(streams.__all__)
    assert len(streams.__all__) == len(set(streams.__all__))
    for name in streams.__all__:
        assert getattr(streams, name) is not None, name
    assert streams.KafkaStreams.State is streams.KafkaStreamsState


def test_star_import_gives_exactly_all():
    namespace: dict = {}
    exec("from airflow_stateful_provider.streams import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(streams.__all__)


def test_the_engine_package_loads_neither_airflow_nor_spark():
    probe = ("import sys, airflow_stateful_provider.streams; "
             "print(sorted(m for m in ('airflow', 'pyspark') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
