"""The figures of bench/latency.py, from append times alone (no broker here, unit-tested).

A record's latency is the append time of the first output of its key at or after the input
record, minus the input's own append time (both topics use ``LogAppendTime``). Rates are
per second of append time.

*Sustains.* An engine sustains a rate when, over the run's input (the records appended after
the warm-up):

1. the producer delivered it: input rate (records over the span of their append times)
   >= ``SUSTAIN_SHARE`` (95 %) of the target; otherwise the run says nothing about the engine
   (verdict ``None``: the producer, not the engine, fell short);
2. end-to-end rate >= 95 % of the target: the records over the span from the first input's
   append to the last output's (a backlog that outlasts the input stretches the span); and
3. p99 does not grow over the run: the p99 of the last third of the input (by append time) is
   at most ``GROWTH_FACTOR`` (2) times the first third's plus ``GROWTH_SLACK_MS`` (100 ms), so
   a queue that builds up fails even when the run is too short for the rate test to see it,
   while a machine's jitter (a shared machine: one pause of a few hundred ms) does not.

*Pause around an event* (a second instance joins, an instance restarts on a wiped state
directory): the longest time without any output append from the event on (the gap from the
event to the first output after it included), next to the longest gap before the event; and
p99 and max latency of the inputs appended in the window after the event, next to those of
the inputs before it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any

SUSTAIN_SHARE = 0.95
GROWTH_FACTOR, GROWTH_SLACK_MS = 2.0, 100
#: The rate search stops when the bracket is narrower than this share of the sustained rate.
SEARCH_RESOLUTION = 0.1


def latencies(inputs: list[tuple[bytes, int]], outputs: list[tuple[bytes, int]]) -> list[tuple[int, int]]:
    """(input append time, latency) per input record that has an output of its key at or after it."""
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for key, ts in outputs:
        by_key[key].append(ts)
    for times in by_key.values():
        times.sort()
    found = []
    for key, ts in inputs:
        times = by_key.get(key, [])
        i = bisect.bisect_left(times, ts)
        if i < len(times):
            found.append((ts, times[i] - ts))
    return found


def percentile(ordered: list[int], q: float) -> int:
    """The value below which a share ``q`` of the sorted ``ordered`` lies (nearest rank)."""
    if not ordered:
        raise ValueError("percentile of no values")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def percentiles(values: list[int]) -> dict[str, Any]:
    """Count, p50, p99, p99.9 and max of ``values`` (milliseconds)."""
    if not values:
        return {"samples": 0}
    ordered = sorted(values)
    return {"samples": len(ordered), "p50_ms": percentile(ordered, 0.50), "p99_ms": percentile(ordered, 0.99),
            "p999_ms": percentile(ordered, 0.999), "max_ms": ordered[-1]}


def sustained(timed: list[tuple[int, int]], inputs: int, target: int) -> dict[str, Any]:
    """Whether a run at ``target`` records/s was sustained (module docstring), with its rates and
    the p99 of its first and last third. ``timed``: (append time, latency) per input record that
    got an output; ``inputs``: the records sent (those without an output count as not done)."""
    if len(timed) < 3 or inputs < 3:
        return {"sustained": False, "reason": "no output"}
    by_time = sorted(timed)
    first_in, last_in = by_time[0][0], by_time[-1][0]
    last_out = max(ts + latency for ts, latency in by_time)
    input_rate = inputs / max((last_in - first_in) / 1000, 1e-3)
    end_to_end = len(by_time) / max((last_out - first_in) / 1000, 1e-3)
    third = len(by_time) // 3
    p99_first = percentile(sorted(latency for _, latency in by_time[:third]), 0.99)
    p99_last = percentile(sorted(latency for _, latency in by_time[-third:]), 0.99)
    figures = {"input_rate": round(input_rate), "end_to_end_rate": round(end_to_end),
               "p99_first_third_ms": p99_first, "p99_last_third_ms": p99_last}
    if input_rate < SUSTAIN_SHARE * target:
        return {"sustained": None, "reason": "the producer fell short", **figures}
    reasons = []
    if len(by_time) < inputs:
        reasons.append(f"{inputs - len(by_time)} records without output")
    if end_to_end < SUSTAIN_SHARE * target:
        reasons.append(f"end-to-end {end_to_end:,.0f}/s < {SUSTAIN_SHARE:.0%} of {target:,}")
    if p99_last > GROWTH_FACTOR * p99_first + GROWTH_SLACK_MS:
        reasons.append(f"p99 grew from {p99_first} to {p99_last} ms")
    return {"sustained": not reasons, "reason": "; ".join(reasons), **figures}


def next_rate(sustained_rate: int, failed_rate: int | None, max_rate: int, factor: float = 1.5) -> int | None:
    """The next rate to try in the search for the highest sustained rate, or None when done:
    above the highest sustained rate by ``factor`` (at most ``max_rate``) while nothing failed,
    then halfway into the bracket, rounded to 500 records/s, until it is narrower than
    ``SEARCH_RESOLUTION`` of the sustained rate."""
    if failed_rate is None:
        if sustained_rate >= max_rate:
            return None
        return min(max_rate, _round(sustained_rate * factor))
    if failed_rate - sustained_rate <= SEARCH_RESOLUTION * sustained_rate:
        return None
    middle = _round((sustained_rate + failed_rate) / 2)
    return middle if sustained_rate < middle < failed_rate else None


def _round(rate: float) -> int:
    return max(500, int(round(rate / 500)) * 500)


def longest_gap(times: list[int], start: int, end: int) -> int:
    """The longest stretch in [start, end] without a time of ``times`` (sorted): from ``start``
    to the first time, between two times, and from the last time to ``end``."""
    inside = [t for t in times if start <= t <= end]
    edges = [start, *inside, end]
    return max(b - a for a, b in zip(edges, edges[1:], strict=False))


def event_figures(timed: list[tuple[int, int]], outputs: list[int], warm_ms: int, event_ms: int,
                  window_ms: int) -> dict[str, Any]:
    """Steady state before the event against the window after it (module docstring). ``outputs``:
    the output append times, sorted; the longest gap after the event runs until the last output."""
    before = sorted(latency for ts, latency in timed if warm_ms <= ts < event_ms)
    after = sorted(latency for ts, latency in timed if event_ms <= ts < event_ms + window_ms)
    last_output = outputs[-1] if outputs else event_ms

    def side(values: list[int]) -> dict[str, int]:
        return {"p99_ms": percentile(values, 0.99), "max_ms": values[-1]} if values else {}

    return {"before": {**side(before), "longest_gap_ms": longest_gap(outputs, warm_ms, event_ms)},
            "after": {**side(after), "longest_gap_ms": longest_gap(outputs, event_ms, max(event_ms, last_output))}}
