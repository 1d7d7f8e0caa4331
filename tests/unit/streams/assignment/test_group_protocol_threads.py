"""Spreading one client's tasks over its threads: balanced, sticky, subtopologies interleaved."""

from __future__ import annotations

import random

import pytest

from airflow_stateful_provider.streams.assignment.thread_assignment import (
    ThreadTasks,
    assign_tasks_to_threads,
)
from airflow_stateful_provider.streams.task_id import TaskId


def tasks(*texts: str) -> frozenset[TaskId]:
    return frozenset(TaskId.parse(x) for x in texts)


def test_fresh_threads_get_balanced_interleaved_tasks():
    result = assign_tasks_to_threads(
        ["t1", "t2"], tasks("0_0", "0_1", "0_2", "0_3"), tasks("1_0", "1_1"), tasks("2_0", "2_1"), {}, {})
    assert result == {
        "t1": ThreadTasks(tasks("0_0", "0_2", "1_0"), tasks("2_0")),
        "t2": ThreadTasks(tasks("0_1", "0_3", "1_1"), tasks("2_1")),
    }


def test_threads_keep_previous_tasks_while_balance_allows():
    result = assign_tasks_to_threads(
        ["t1", "t2", "t3"], tasks("0_0", "0_1", "0_2", "0_3", "0_4", "0_5"), (), (),
        {"t1": tasks("0_0", "0_1", "0_2", "0_3"), "t3": tasks("0_5")}, {})
    assert result["t1"].active_tasks == tasks("0_0", "0_1")   # floor(6/3) = 2 kept
    assert result["t3"].active_tasks >= tasks("0_5")
    assert sorted(len(r.active_tasks) for r in result.values()) == [2, 2, 2]


def test_extra_task_goes_to_its_previous_owner_when_loads_tie():
    result = assign_tasks_to_threads(["t1", "t2"], tasks("0_0", "0_1", "0_2"), (), (),
                                     {"t2": tasks("0_0", "0_1", "0_2")}, {})
    assert result["t2"].active_tasks == tasks("0_0", "0_1", "0_2") - result["t1"].active_tasks
    assert len(result["t2"].active_tasks) == 2  # kept 1 (floor), then won the tie for another


def test_stateless_tasks_stick_too_and_standbys_follow_previous_standby_or_active():
    result = assign_tasks_to_threads(
        ["t1", "t2"], (), tasks("1_0", "1_1"), tasks("0_0", "0_1"),
        {"t1": tasks("1_1", "0_1")}, {"t2": tasks("0_0")})
    assert result["t1"] == ThreadTasks(tasks("1_1"), tasks("0_1"))  # 0_1 was active here: standby here
    assert result["t2"] == ThreadTasks(tasks("1_0"), tasks("0_0"))


def test_random_inputs_stay_balanced_and_complete():
    rng = random.Random(7)
    for _ in range(200):
        threads = [f"t{i}" for i in range(rng.randint(1, 4))]
        all_tasks = [TaskId(s, p) for s in range(3) for p in range(rng.randint(0, 6))]
        rng.shuffle(all_tasks)
        cut1, cut2 = sorted(rng.sample(range(len(all_tasks) + 1), 2)) if len(all_tasks) >= 1 else (0, 0)
        stateful, stateless, standby = all_tasks[:cut1], all_tasks[cut1:cut2], all_tasks[cut2:]
        previous = {t: set(rng.sample(all_tasks, min(len(all_tasks), rng.randint(0, 4)))) for t in threads}
        result = assign_tasks_to_threads(threads, stateful, stateless, standby, previous, {})
        actives = [task for r in result.values() for task in r.active_tasks]
        standbys = [task for r in result.values() for task in r.standby_tasks]
        assert sorted(actives) == sorted(stateful + stateless)
        assert sorted(standbys) == sorted(standby)
        active_counts = [len(r.active_tasks) for r in result.values()]
        total_counts = [len(r.active_tasks) + len(r.standby_tasks) for r in result.values()]
        assert max(active_counts) - min(active_counts) <= 1
        assert max(total_counts) - min(total_counts) <= 1


@pytest.mark.parametrize("threads, message", [([], "at least one thread"), (["a", "a"], "must be distinct")])
def test_bad_thread_lists_are_refused(threads, message):
    with pytest.raises(ValueError, match=message):
        assign_tasks_to_threads(threads, (), (), (), {}, {})
