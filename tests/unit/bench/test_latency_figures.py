"""bench/latency_figures.py: latencies, percentiles, the sustained-rate verdict, the rate search
and the pause around an event, on hand-made append times (oracles computed by hand)."""

from __future__ import annotations

import pytest

from bench.latency_figures import (
    event_figures,
    latencies,
    longest_gap,
    next_rate,
    percentile,
    percentiles,
    sustained,
)


def test_each_input_takes_the_first_output_of_its_key_at_or_after_it():
    inputs = [(b"a", 100), (b"b", 105), (b"a", 200), (b"c", 300)]
    outputs = [(b"a", 250), (b"a", 130), (b"b", 104), (b"b", 160)]
    # a@100 -> 130 (not 250); b@105 -> 160 (104 is before it); a@200 -> 250; c has no output
    assert latencies(inputs, outputs) == [(100, 30), (105, 55), (200, 50)]


def test_an_output_appended_in_the_same_millisecond_counts():
    assert latencies([(b"a", 100)], [(b"a", 100)]) == [(100, 0)]


def test_percentiles_by_nearest_rank():
    values = list(range(1, 1001))  # 1..1000
    assert percentile(values, 0.5) == 501
    assert percentile(values, 0.99) == 991
    assert percentile(values, 1.0) == 1000
    assert percentiles(list(reversed(values))) == {"samples": 1000, "p50_ms": 501, "p99_ms": 991,
                                                     "p999_ms": 1000, "max_ms": 1000}
    assert percentiles([]) == {"samples": 0}
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)


def _steady(rate: int, seconds: int, latency_of) -> list[tuple[int, int]]:
    """(append time, latency) of ``rate * seconds`` inputs evenly spread, latency by index."""
    count = rate * seconds
    return [(i * 1000 // rate, latency_of(i, count)) for i in range(count)]


def test_a_run_at_its_rate_with_flat_latency_is_sustained():
    timed = _steady(1000, 20, lambda i, n: 50)
    verdict = sustained(timed, len(timed), 1000)
    assert verdict["sustained"] is True and verdict["reason"] == ""
    assert verdict["input_rate"] == 1000 and verdict["end_to_end_rate"] == 998  # 20,000 over 20.049 s


def test_a_growing_backlog_is_not_sustained_even_when_the_rates_pass():
    # latency climbs from 50 ms to 850 ms over the run: end-to-end still >= 95 %, p99 grew
    timed = _steady(1000, 20, lambda i, n: 50 + 800 * i // n)
    verdict = sustained(timed, len(timed), 1000)
    assert verdict["end_to_end_rate"] >= 950
    assert verdict["sustained"] is False and "p99 grew" in verdict["reason"]


def test_an_engine_that_finishes_late_is_not_sustained():
    # flat, but 2 s behind from the start: 20 s of input done in 22 s = 909/s
    timed = _steady(1000, 20, lambda i, n: 2000)
    verdict = sustained(timed, len(timed), 1000)
    assert verdict["sustained"] is False and "end-to-end 909/s" in verdict["reason"]


def test_records_without_output_fail_the_run():
    timed = _steady(1000, 20, lambda i, n: 50)
    verdict = sustained(timed, len(timed) + 5, 1000)
    assert verdict["sustained"] is False and verdict["reason"] == "5 records without output"


def test_a_producer_short_of_the_rate_says_nothing_about_the_engine():
    timed = _steady(800, 20, lambda i, n: 50)
    verdict = sustained(timed, len(timed), 1000)
    assert verdict["sustained"] is None and verdict["reason"] == "the producer fell short"
    assert sustained([], 0, 1000) == {"sustained": False, "reason": "no output"}


def test_the_search_climbs_until_a_failure_then_halves_the_bracket():
    assert next_rate(10_000, None, 20_000) == 15_000
    assert next_rate(15_000, None, 20_000) == 20_000  # capped
    assert next_rate(20_000, None, 20_000) is None  # the ceiling was sustained
    assert next_rate(10_000, 15_000, 20_000) == 12_500
    assert next_rate(12_500, 13_500, 20_000) is None  # bracket within 10 % of the sustained rate
    assert next_rate(1_000, 5_000, 20_000) == 3_000


def test_longest_gap_counts_the_edges():
    assert longest_gap([110, 120, 400, 450], 100, 500) == 280
    assert longest_gap([], 100, 500) == 400
    assert longest_gap([150, 900], 100, 500) == 350  # 900 is outside: gap 150 -> 500


def test_the_pause_after_an_event_against_the_steady_state_before():
    # inputs every 10 ms from 0 to 2,000 ms, 20 ms latency; the engine is paused from 1,000 ms (the
    # event) to 1,600 ms: the inputs appended meanwhile get their output at 1,600 ms
    timed = [(t, max(20, 1600 - t) if 1000 <= t < 1600 else 20) for t in range(0, 2000, 10)]
    outputs = sorted({t + latency for t, latency in timed})
    figures = event_figures(timed, outputs, warm_ms=0, event_ms=1000, window_ms=1000)
    assert figures["before"] == {"p99_ms": 20, "max_ms": 20, "longest_gap_ms": 20}
    # the output of input 990 at 1010, then nothing until 1600
    assert figures["after"] == {"p99_ms": 600, "max_ms": 600, "longest_gap_ms": 590}
