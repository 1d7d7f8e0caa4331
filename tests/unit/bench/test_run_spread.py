"""The spread of bench/vs_kafka_streams.py's runs and the ratios issue 36 asks for: medians,
and this engine's worst run against Kafka Streams' best."""

from __future__ import annotations

import pytest

from bench.vs_kafka_streams import engine_ratios, run_spread


def runs(*cpu_per_record: tuple[float, int]) -> list[dict]:
    return [{"cpu_s": cpu, "records_per_cpu_s": rate, "rps": rate // 2} for cpu, rate in cpu_per_record]


def test_the_spread_is_min_median_and_max_of_each_measure():
    spread = run_spread(runs((20.0, 15_000), (27.5, 10_900), (18.2, 16_480), (24.0, 12_500), (23.8, 12_600)))
    assert spread["cpu_s"] == {"min": 18.2, "median": 23.8, "max": 27.5}
    assert spread["records_per_cpu_s"] == {"min": 10_900, "median": 12_600, "max": 16_480}


def test_several_runs_give_the_medians_ratio_and_the_worst_against_the_best():
    python = runs((10.0, 30_000), (12.0, 25_000), (15.0, 20_000))
    java = runs((20.0, 15_000), (21.0, 14_000), (25.0, 12_000))
    ratios = engine_ratios(python, java)
    assert ratios["per_cpu_second"] == 2.0  # best against best
    assert ratios["per_cpu_second_median"] == pytest.approx(25_000 / 14_000, abs=1e-3)
    assert ratios["per_cpu_second_worst_vs_best"] == pytest.approx(20_000 / 15_000, abs=1e-3)
    assert ratios["per_second"] == 2.0


def test_one_run_each_gives_best_against_best_only():
    assert set(engine_ratios(runs((10.0, 30_000)), runs((20.0, 15_000)))) == {"per_cpu_second", "per_second"}
