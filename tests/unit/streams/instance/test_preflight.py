"""What an instance checks before it creates anything, without a broker: the names of the
topics its topology makes, its state directory, the snapshot implementation."""

from __future__ import annotations

import importlib.util

import pytest

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.dsl.builder import StreamsBuilder
from airflow_stateful_provider.streams.dsl.materialized import Materialized
from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.instance.preflight import (
    check_snapshot_storage,
    check_topic_names,
    prepare_state_dir,
)
from airflow_stateful_provider.streams.processing.deserialization import DeadLetterQueueExceptionHandler


def counts(store: str = "counts"):
    builder = StreamsBuilder()
    builder.stream("in").group_by_key().count(Materialized.as_(store)).to_stream().to("out")
    return builder.build()


def test_internal_topic_names_built_from_the_application_id_must_fit():
    check_topic_names(counts(), StreamsConfig("a" * 232, "h:1"))  # <app>-counts-changelog: 249 characters
    with pytest.raises(ConfigError, match=r"the changelog topic of store 'counts' would be illegal: topic name "
                                          r"'a{233}-counts-changelog' is 250 characters long; Kafka allows at most "
                                          r"249; shorten application_id \(233 characters\)"):
        check_topic_names(counts(), StreamsConfig("a" * 233, "h:1"))


def test_a_store_name_kafka_refuses_as_a_topic_name_is_named():
    builder = StreamsBuilder()
    builder.table("in", materialized=Materialized.as_("by key"))
    with pytest.raises(ConfigError, match="store 'by key' would be illegal: .* contains .' '.; .*; rename the store"):
        check_topic_names(builder.build(), StreamsConfig("app", "h:1"))


def test_a_dead_letter_handler_object_with_an_illegal_topic_is_refused():
    config = StreamsConfig("app", "h:1", deserialization_exception_handler=DeadLetterQueueExceptionHandler("dl q"))
    with pytest.raises(ConfigError, match="deserialization_exception_handler: the dead-letter topic name 'dl q'"):
        check_topic_names(counts(), config)


def test_the_state_directory_is_created_and_must_be_writable(tmp_path):
    app_dir = prepare_state_dir(StreamsConfig("app", "h:1", state_dir=str(tmp_path / "state")))
    assert app_dir == str(tmp_path / "state" / "app") and (tmp_path / "state" / "app").is_dir()
    assert list((tmp_path / "state" / "app").iterdir()) == []  # the write check leaves nothing behind
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=f"state_dir '{tmp_path / 'file'}' cannot hold the task directories of "
                                          f"application 'app': Not a directory"):
        prepare_state_dir(StreamsConfig("app", "h:1", state_dir=str(tmp_path / "file")))


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="needs gcsfs not to be installed")
def test_a_snapshot_implementation_that_is_not_installed_says_what_to_install():
    check_snapshot_storage(StreamsConfig("app", "h:1", snapshot_url="file:///tmp/snapshots"))
    with pytest.raises(ConfigError, match="snapshot_url 'gs://b/p': the fsspec implementation of gs:// cannot be "
                                          "loaded on this machine .*; pip install gcsfs"):
        check_snapshot_storage(StreamsConfig("app", "h:1", snapshot_url="gs://b/p"))
