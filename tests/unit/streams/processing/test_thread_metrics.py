"""Thread-level metrics: windowed averages and maxima that forget old samples, counters that
only count what Kafka Streams counts (non-empty polls, commits that committed)."""

from __future__ import annotations

from airflow_stateful_provider.streams.processing.metrics import ThreadMetrics, WindowedStat


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_windowed_stat_averages_the_last_window_and_forgets_older_values():
    clock = Clock()
    stat = WindowedStat(window_s=30, clock=clock)
    assert stat.avg_max() == (None, None)
    stat.record(10)
    clock.now += 10
    stat.record(30)
    assert stat.avg_max() == (20.0, 30.0)
    clock.now += 25  # the first value is 35 s old, the second 25 s
    assert stat.avg_max() == (30.0, 30.0)
    clock.now += 5  # both older than the window
    assert stat.avg_max() == (None, None)


def test_thread_metrics_count_non_empty_polls_and_commits():
    clock = Clock()
    metrics = ThreadMetrics(clock=clock)
    for size in (0, 500, 0, 100):
        metrics.record_poll(size)
    metrics.record_processed(600)
    metrics.record_commit(12.5)
    metrics.record_commit(7.5)
    metrics.record_transaction_abort()
    assert metrics.poll_records.avg_max() == (300.0, 500.0)  # the empty polls are no samples
    assert metrics.commit_latency.avg_max() == (10.0, 12.5)
    assert (metrics.process_total, metrics.commit_total, metrics.transaction_aborts_total) == (600, 2, 1)
