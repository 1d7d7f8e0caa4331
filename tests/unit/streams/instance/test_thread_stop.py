"""Waiting for threads to stop: bounded when asked, and a thread that does not stop is named
with the code it is in."""

from __future__ import annotations

import threading
import time

from airflow_stateful_provider.streams.instance.thread_stop import join_threads, thread_location


def block_until_released(release: threading.Event) -> None:
    release.wait()


def blocked_thread(release: threading.Event, name: str = "stuck-one") -> threading.Thread:
    thread = threading.Thread(target=block_until_released, args=(release,), name=name, daemon=True)
    thread.start()
    return thread


def test_a_thread_that_does_not_stop_is_returned_at_the_deadline_and_named_with_where_it_is(caplog):
    release = threading.Event()
    stuck = blocked_thread(release)
    done = threading.Thread(target=lambda: None, name="done-one")
    done.start()
    caplog.set_level("WARNING")
    try:
        started = time.monotonic()
        running = join_threads([stuck, done], time.monotonic() + 0.6, "closing test", report_every_s=0.2)
        waited = time.monotonic() - started
        assert running == [stuck]
        assert 0.6 <= waited < 30, waited  # the deadline holds; the upper bound only catches a hang
        reports = [r.getMessage() for r in caplog.records]
        assert reports, "no report while the thread did not stop"
        assert all(m.startswith("closing test: thread stuck-one still running after ") for m in reports), reports
        assert "in block_until_released" in reports[0] and "test_thread_stop.py:" in reports[0], reports
        assert "done-one" not in " ".join(reports)
    finally:
        release.set()
    assert join_threads([stuck], None, "closing test") == []
    assert not stuck.is_alive()


def test_without_a_deadline_the_wait_lasts_until_the_threads_end(caplog):
    release = threading.Event()
    stuck = blocked_thread(release)
    threading.Timer(0.5, release.set).start()
    caplog.set_level("WARNING")
    assert join_threads([stuck], None, "closing test", report_every_s=0.1) == []
    assert not stuck.is_alive()
    assert any("stuck-one still running" in r.getMessage() for r in caplog.records)


def test_the_location_of_a_thread_not_running_python_code_is_empty():
    never_started = threading.Thread(target=lambda: None)
    assert thread_location(never_started) == ""
    assert join_threads([never_started], time.monotonic() + 5, "closing test") == []  # no wait on it
    release = threading.Event()
    stuck = blocked_thread(release)
    try:
        where = thread_location(stuck, depth=3)  # Event.wait, Condition.wait, then the caller
        assert where.startswith("threading.py:") and where.endswith("in block_until_released"), where
        assert where.count(" <- ") == 2, where
    finally:
        release.set()
        stuck.join()
