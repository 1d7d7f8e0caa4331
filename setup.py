"""The one thing pyproject.toml cannot say yet without an experimental table: the C loop of the
record batch decoder (airflow_stateful_provider/streams/kafka/batch_decoding.py). It is optional:
where it does not build (no C compiler), the pure-Python decoder does the same work, slower."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("airflow_stateful_provider.streams.kafka._native_batch_decoding",
                             ["airflow_stateful_provider/streams/kafka/_native_batch_decoding.c"], optional=True)])
