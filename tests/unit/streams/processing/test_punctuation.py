"""docs/semantics.md §6, every example literally: at the queue level and through a task."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_stateful_provider.streams.errors import ConfigError, IllegalStateError
from airflow_stateful_provider.streams.processing.processor_context import ProcessorContextImpl
from airflow_stateful_provider.streams.processing.punctuation import PunctuationQueue, PunctuationSchedule
from airflow_stateful_provider.streams.processor import Processor, PunctuationType, Record
from airflow_stateful_provider.streams.testing import TopologyTestDriver
from airflow_stateful_provider.streams.topology.topology import Topology

STREAM = PunctuationType.STREAM_TIME
WALL = PunctuationType.WALL_CLOCK_TIME


def _queue(start: int, interval: int):
    queue = PunctuationQueue()
    fired: list[int] = []
    cancellable = queue.schedule(PunctuationSchedule("node", start, interval, fired.append))
    return queue, fired, cancellable


def _check(queue: PunctuationQueue, now: int) -> bool:
    return queue.maybe_punctuate(now, WALL)


def test_due_100_every_100_example():
    queue, fired, _ = _queue(100, 100)
    expected = {0: False, 99: False, 100: True, 199: False, 200: True, 1001: True, 1002: False, 1100: True}
    for now, fires in expected.items():
        assert _check(queue, now) is fires, now
    # the punctuator is called with `now`, not with the due time; 1001 fired once
    assert fired == [100, 200, 1001, 1100]


def test_missed_intervals_collapse_next_is_1100_after_1001():
    queue, fired, _ = _queue(100, 100)
    for now in (100, 200, 1001):
        _check(queue, now)
    assert queue.next_due() == 1100


def test_start_50_example():
    queue, fired, _ = _queue(50, 100)
    assert _check(queue, 50) and fired == [50]
    assert _check(queue, 150) and fired == [50, 150]
    assert _check(queue, 1051) and fired == [50, 150, 1051]  # once
    assert queue.next_due() == 1150
    assert not _check(queue, 1149)
    assert _check(queue, 1150) and fired[-1] == 1150


def test_schedule_next_rule():
    s = PunctuationSchedule("n", 100, 100, lambda t: None)
    assert s.next(100).timestamp == 200          # t = due + interval
    assert s.next(199).timestamp == 200
    assert s.next(200).timestamp == 300          # now >= t: collapse
    assert s.next(1001).timestamp == 1100        # due + ((1001-100)//100 + 1) * 100


def test_cancellation_from_inside_the_callback_stops_the_schedule():
    queue = PunctuationQueue()
    fired: list[int] = []
    handle: list = []

    def punctuator(now: int) -> None:
        fired.append(now)
        if len(fired) == 2:
            handle[0].cancel()

    handle.append(queue.schedule(PunctuationSchedule("n", 10, 10, punctuator)))
    for now in (10, 20, 30, 40, 100):
        queue.maybe_punctuate(now, WALL)
    assert fired == [10, 20]
    assert not queue.can_punctuate(1000)


def test_cancellable_follows_the_successor_schedule():
    queue, fired, cancellable = _queue(10, 10)
    for now in (10, 20, 30):
        _check(queue, now)
    assert fired == [10, 20, 30]
    cancellable.cancel()  # the handle from schedule() cancels the current successor
    for now in (40, 50, 60):
        _check(queue, now)
    assert fired == [10, 20, 30]


def test_cancel_before_first_fire_and_can_punctuate():
    queue, fired, cancellable = _queue(10, 10)
    assert queue.can_punctuate(10)
    cancellable.cancel()
    assert not queue.can_punctuate(10)
    assert not _check(queue, 10)
    assert fired == []


@pytest.mark.parametrize("interval", [0, -1, 1.5, True])
def test_interval_must_be_at_least_1ms(interval):
    with pytest.raises(ConfigError, match="interval"):
        PunctuationSchedule("n", 0, interval, lambda t: None)


def test_ties_fire_in_scheduling_order():
    queue = PunctuationQueue()
    fired: list[str] = []
    queue.schedule(PunctuationSchedule("a", 10, 10, lambda t: fired.append("a")))
    queue.schedule(PunctuationSchedule("b", 10, 10, lambda t: fired.append("b")))
    queue.maybe_punctuate(10, WALL)
    assert fired == ["a", "b"]


# ---------------------------------------------------------------------- through a task


class _Punctuating(Processor):
    """Schedules one punctuation in init and records (type, now) of each call."""

    def __init__(self, calls: list, interval, type_: PunctuationType, cancel_after: int | None = None) -> None:
        self.calls = calls
        self.interval = interval
        self.type = type_
        self.cancel_after = cancel_after

    def init(self, context):
        super().init(context)
        self.cancellable = context.schedule(self.interval, self.type, self.punctuate)

    def punctuate(self, now: int) -> None:
        self.calls.append(now)
        self.context.forward(Record(b"p", str(now).encode(), now))
        if self.cancel_after is not None and len(self.calls) >= self.cancel_after:
            self.cancellable.cancel()

    def process(self, record):
        pass


def _driver(calls, interval, type_, cancel_after=None, **kwargs):
    topology = (
        Topology()
        .add_source("src", "in")
        .add_processor("p", lambda: _Punctuating(calls, interval, type_, cancel_after), "src")
        .add_sink("sink", "out", "p")
    )
    return TopologyTestDriver(topology, **kwargs)


def test_stream_time_every_10_records_3_7_25_26_40():
    calls: list[int] = []
    with _driver(calls, 10, STREAM) as driver:
        topic = driver.create_input_topic("in")
        task = driver.tasks[0]
        nexts = []
        for ts in (3, 7, 25, 26, 40):
            topic.pipe_input(b"k", b"v", ts)
            nexts.append(task._stream_queue.next_due())
        assert calls == [3, 25, 40]
        assert nexts == [10, 10, 30, 30, 50]


def test_stream_time_first_due_is_0_fires_once_stream_time_is_known():
    calls: list[int] = []
    with _driver(calls, 1000, STREAM) as driver:
        assert calls == []  # stream time unknown before the first record
        driver.advance_wall_clock_time(10_000)
        assert calls == []  # wall clock does not drive STREAM_TIME
        driver.create_input_topic("in").pipe_input(b"k", b"v", 0)
        assert calls == [0]


def test_walkthrough_every_5s_kafka_alignment_wins():
    """docs/semantics.md §6, every 5 s through a task with records at 1 s, 4 s, 8 s, 10 s.
    Kafka Streams aligns STREAM_TIME schedules to 0 (StreamTask.schedule: "align
    punctuation to 0L"), so the schedule is 0, 5 s, 10 s: fires at 1 s (next 5 s), 8 s
    (next 10 s) and 10 s. A walkthrough that takes the first stream time as the first due
    time (1 s fires -> next 6 s, 4 s no, 8 s fires -> next 11 s, 10 s no) holds only for a
    schedule whose first due time is 1 s (next test)."""
    calls: list[int] = []
    with _driver(calls, timedelta(seconds=5), STREAM) as driver:
        topic = driver.create_input_topic("in")
        task = driver.tasks[0]
        seen = []
        for ts in (1000, 4000, 8000, 10_000):
            topic.pipe_input(b"k", b"v", ts)
            seen.append((ts, list(calls), task._stream_queue.next_due()))
        assert seen == [
            (1000, [1000], 5000),
            (4000, [1000], 5000),
            (8000, [1000, 8000], 10_000),
            (10_000, [1000, 8000, 10_000], 15_000),
        ]


def test_walkthrough_numbers_with_first_due_at_1s():
    queue, fired, _ = _queue(1000, 5000)
    assert _check(queue, 1000) and queue.next_due() == 6000
    assert not _check(queue, 4000)
    assert _check(queue, 8000) and queue.next_due() == 11_000
    assert not _check(queue, 10_000)
    assert fired == [1000, 8000]


def test_wall_clock_first_due_is_now_plus_interval():
    calls: list[int] = []
    with _driver(calls, 100, WALL, initial_wall_clock_time=1000) as driver:
        out = driver.create_output_topic("out")
        driver.advance_wall_clock_time(99)
        assert calls == []
        driver.advance_wall_clock_time(1)
        assert calls == [1100]
        driver.advance_wall_clock_time(250)  # 1350: fires once with now, next 1400
        assert calls == [1100, 1350]
        assert driver.tasks[0]._wall_queue.next_due() == 1400
        # records forwarded by a punctuator reach the sink with the punctuator's timestamp
        assert [r.timestamp for r in out.read_records_to_list()] == [1100, 1350]


def test_wall_clock_not_driven_by_records():
    calls: list[int] = []
    with _driver(calls, 100, WALL) as driver:
        driver.create_input_topic("in").pipe_input(b"k", b"v", 10_000)
        assert calls == []


def test_cancel_from_inside_punctuator_through_task():
    calls: list[int] = []
    with _driver(calls, 10, STREAM, cancel_after=2) as driver:
        topic = driver.create_input_topic("in")
        for ts in (0, 10, 20, 30, 40):
            topic.pipe_input(b"k", b"v", ts)
        assert calls == [0, 10]


def test_schedule_accepts_timedelta_and_refuses_sub_ms_interval():
    calls: list[int] = []
    with pytest.raises(ConfigError, match="punctuation interval"):
        _driver(calls, 0, STREAM)


def test_schedule_refused_on_a_standby():
    class _FakeTask:
        id = "0_0"

    ctx = ProcessorContextImpl(_FakeTask(), standby=True)  # type: ignore[arg-type]
    with pytest.raises(IllegalStateError, match="standby"):
        ctx.schedule(10, STREAM, lambda t: None)


def test_punctuator_exception_is_wrapped_with_node_name():
    from airflow_stateful_provider.streams.errors import ProcessingError

    class Boom(Processor):
        def init(self, context):
            context.schedule(10, STREAM, self.boom)

        def boom(self, now):
            raise RuntimeError("kaput")

        def process(self, record):
            pass

    topology = Topology().add_source("src", "in").add_processor("boom", Boom, "src")
    with TopologyTestDriver(topology) as driver:
        with pytest.raises(ProcessingError, match="punctuating processor 'boom'") as info:
            driver.create_input_topic("in").pipe_input(b"k", b"v", 5)
        assert isinstance(info.value.__cause__, RuntimeError)
