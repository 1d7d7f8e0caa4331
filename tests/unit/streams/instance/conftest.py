"""A stream thread built without a broker: its loop is not run, tests give it a consumer."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.instance.stream_thread import StreamThread


@pytest.fixture
def thread(tmp_path) -> StreamThread:
    builder = StreamsBuilder()
    builder.stream("in").to("out")
    config = StreamsConfig.from_mapping({"application_id": "app", "bootstrap_servers": "localhost:9092",
                                         "state_dir": str(tmp_path)})
    return StreamThread(1, builder.build(), config, client_id="c", consumer_factory=lambda **_: None,
                        producer_factory=lambda **_: None)
