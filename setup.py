"""The one thing pyproject.toml cannot say yet without an experimental table: the two C loops,
of the record batch decoder (airflow_stateful_provider/streams/kafka/batch_decoding.py) and of a
key-value store's restoration (airflow_stateful_provider/streams/state/keyvalue/changelog_batch.py).
They are optional: where they do not build (no C compiler), Python loops do the same work, slower."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("airflow_stateful_provider.streams.kafka._native_batch_decoding",
              ["airflow_stateful_provider/streams/kafka/_native_batch_decoding.c"], optional=True),
    Extension("airflow_stateful_provider.streams.state.keyvalue._native_changelog_batch",
              ["airflow_stateful_provider/streams/state/keyvalue/_native_changelog_batch.c"], optional=True),
])
