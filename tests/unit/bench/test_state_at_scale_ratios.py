"""bench/state_at_scale.py against Kafka Streams: the ratios issue 36's targets are checked on,
and the --engines option both benches share."""

from __future__ import annotations

import argparse

import pytest

from bench.state_at_scale import vs_kafka_streams
from bench.vs_kafka_streams import parse_engines


def test_ratios_put_this_engine_over_kafka_streams():
    ratios = vs_kafka_streams(
        {"records": 1_000, "records_per_s": 300, "cpu_s": 10.0, "max_rss_mb": 150},
        {"records": 1_000, "records_per_s": 200, "cpu_s": 20.0, "max_rss_mb": 300},
        {"records_per_s": 90_000, "seconds_to_running": 10.0},
        {"records_per_s": 60_000, "seconds_to_running": 30.0})
    assert ratios == {"restore_records_per_s": 1.5, "restore_to_running": 3.0,  # less time is faster: theirs / mine
                      "records_per_s": 1.5, "records_per_cpu_s": 2.0, "max_rss": 0.5}


def test_a_restore_without_a_window_gives_no_ratio_rather_than_zero():
    process = {"records": 1_000, "records_per_s": 100, "cpu_s": 1.0, "max_rss_mb": 100}
    ratios = vs_kafka_streams(process, process, {"records_per_s": None, "seconds_to_running": 2.0},
                              {"records_per_s": 50_000, "seconds_to_running": 2.0})
    assert ratios["restore_records_per_s"] is None
    assert ratios["restore_to_running"] == 1.0


def test_engines_are_parsed_in_the_order_given():
    assert parse_engines(" python, java ") == ["python", "java"]
    assert parse_engines("java") == ["java"]


@pytest.mark.parametrize("text, named", [("python,scala", "scala"), (" , ", "no engine")])
def test_an_unknown_or_missing_engine_is_named(text, named):
    with pytest.raises(argparse.ArgumentTypeError, match=named):
        parse_engines(text)
