"""``stateful-streams``, the on-call command line: one module per command (main.py parses and
dispatches; kafka_settings.py says where Kafka is)."""

from airflow_stateful_provider.cli.kafka_settings import BOOTSTRAP_ENV
from airflow_stateful_provider.cli.main import build_parser, main

__all__ = ["BOOTSTRAP_ENV", "build_parser", "main"]
