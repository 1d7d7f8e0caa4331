"""What an instance reports about itself: its status document, read from a running
``KafkaStreams`` and its threads, with a restore rate per changelog partition.

The instance is read through the views of status/instance_view.py: this package sits below
the runtime and does not import it. Besides the tasks' states and changelog progress, the
document carries the metrics on-call graphs (docs/status-topic.md, "Metrics"): per stream
thread, Kafka Streams' thread-level counters and samples; per active task, processed records
and the input partitions' lag; rates are computed here, from one document to the next."""

from __future__ import annotations

import collections
import enum
import logging
import os
import socket
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.durations import duration_arg_ms
from airflow_stateful_provider.streams.kafka.positions import local_lag
from airflow_stateful_provider.streams.status.document import (
    STATE_LOST,
    TASK_STATES,
    document_format_version,
)
from airflow_stateful_provider.streams.status.instance_view import (
    ActiveTaskView,
    ChangelogProgressView,
    InstanceConfigView,
    InstanceView,
    RestoreSourceView,
    StreamThreadView,
    TopicPartitionView,
)
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = ["RestoreRateTracker", "status_document_from_instance"]

log = logging.getLogger(__name__)


class RestoreRateTracker:
    """Offsets (or records) per second of each changelog partition (or counter) over a
    sliding window.

    The rate is (newest position - oldest position) / elapsed time of the samples kept
    within ``window_ms``; it is 0.0 until two samples exist. A position that moves
    backwards (store wiped and restored from the beginning, a counter of a task that moved
    away and back) restarts the window.
    """

    def __init__(self, window_ms: int | timedelta = 30_000) -> None:
        self.window_ms = duration_arg_ms(window_ms, "window_ms", minimum=1)
        self._samples: dict[Any, collections.deque[tuple[int, int]]] = {}

    def observe(self, key: Any, position: int, now_ms: int) -> float:
        samples = self._samples.setdefault(key, collections.deque())
        if samples and (position < samples[-1][1] or now_ms < samples[-1][0]):
            samples.clear()
        samples.append((now_ms, position))
        while len(samples) > 2 and samples[1][0] <= now_ms - self.window_ms:
            samples.popleft()
        first_ms, first_pos = samples[0]
        elapsed = now_ms - first_ms
        return 0.0 if elapsed <= 0 else (position - first_pos) * 1000.0 / elapsed

    def retain(self, keys: Iterable[Any]) -> None:
        """Forget partitions no longer reported (task moved away or restored)."""
        keep = set(keys)
        for key in list(self._samples):
            if key not in keep:
                del self._samples[key]


def _task_state(task_id: TaskId, state: enum.Enum) -> str | None:
    """The document's state of a task in ``state``, or None to leave the task out (closed)."""
    name = str(state.value).lower()
    if name == "closed":
        return None
    if name not in TASK_STATES:
        log.warning("task %s reports state %r, which the status document cannot express; left out", task_id, name)
        return None
    return name


def _rate(tracker: RestoreRateTracker | None, key: tuple[Any, ...], value: int, now_ms: int,
          observed: set[tuple[Any, ...]]) -> float:
    observed.add(key)
    return max(0.0, tracker.observe(key, value, now_ms)) if tracker is not None else 0.0


def _changelog_entry(entry: ChangelogProgressView, task_id: str, now_ms: int, tracker: RestoreRateTracker | None,
                     observed: set[tuple[Any, ...]]) -> dict[str, Any]:
    topic, number = entry.partition[0], entry.partition[1]
    rate = _rate(tracker, (task_id, topic, number), entry.position, now_ms, observed)
    return {"topic": topic, "partition": number, "store": entry.store_name, "start_offset": entry.start_offset,
            "current_offset": entry.position, "end_offset": entry.end_offset, "restore_rate": rate}


def _restore_entry(source: RestoreSourceView | None) -> dict[str, Any]:
    """``{"restore": ...}`` for a task whose restore source is known (optional field)."""
    if source is None:
        return {}
    return {"restore": source.as_dict()}


def _activity_entry(task: ActiveTaskView, key: str, consumer: Any, now_ms: int, tracker: RestoreRateTracker | None,
                    observed: set[tuple[Any, ...]]) -> dict[str, Any]:
    """An active task's optional fields: records processed (and their rate), records dropped
    by reason, and its input partitions' positions and high watermarks."""
    metrics = task.metrics
    out: dict[str, Any] = {"process_total": metrics.process_total,
                           "process_rate": _rate(tracker, ("process", key), metrics.process_total, now_ms, observed)}
    dropped = metrics.dropped_records
    if dropped:
        out["dropped_records"] = dict(dropped)
    inputs = [_input_partition(consumer, tp) for tp in list(task.partitions)]
    if inputs:
        out["input_partitions"] = inputs
    return out


def _input_partition(consumer: Any, tp: TopicPartitionView) -> dict[str, Any]:
    position = end = None
    if consumer is not None:
        try:
            position, end = local_lag(consumer, tp.topic, tp.partition)
        except Exception:
            log.debug("input position of %s-%d unavailable", tp.topic, tp.partition, exc_info=True)
    return {"topic": tp.topic, "partition": tp.partition, "position": position, "end_offset": end}


def _snapshot_entry(uploaded: dict[str, tuple[str, int]], key: str) -> dict[str, Any]:
    """``{"last_snapshot": ...}`` for a task this thread uploaded a snapshot of (optional field)."""
    if key not in uploaded:
        return {}
    snapshot_id, taken_at = uploaded[key]
    return {"last_snapshot": {"snapshot_id": snapshot_id, "taken_at": taken_at}}


def _thread_entry(thread: StreamThreadView, tasks: list[dict[str, Any]], now_ms: int,
                  tracker: RestoreRateTracker | None, observed: set[tuple[Any, ...]]) -> dict[str, Any]:
    """The thread's ``threads[]`` entry; ``records_lag_max`` from its active tasks' entries."""
    metrics = thread.metrics
    commit_avg, commit_max = metrics.commit_latency.avg_max()
    poll_avg, poll_max = metrics.poll_records.avg_max()
    lags = [max(0, p["end_offset"] - p["position"]) for task in tasks for p in task.get("input_partitions", ())
            if p["position"] is not None and p["end_offset"] is not None]
    return {"thread_id": thread.name, "process_total": metrics.process_total,
            "process_rate": _rate(tracker, ("thread", thread.name), metrics.process_total, now_ms, observed),
            "commit_total": metrics.commit_total, "commit_latency_avg": commit_avg, "commit_latency_max": commit_max,
            "poll_records_avg": poll_avg, "poll_records_max": poll_max,
            "records_lag_max": max(lags) if lags else None,
            "transaction_aborts_total": metrics.transaction_aborts_total, **_waits_entry(thread, lags, now_ms)}


def _waits_entry(thread: StreamThreadView, lags: list[int], now_ms: int) -> dict[str, Any]:
    """The Kafka call the thread is blocked in (``blocked_in``, ``blocked_on``, ``blocked_ms``)
    and, while its input waits, how long it has processed nothing (``unprocessed_ms``)."""
    wait = thread.kafka_waits.current
    processed_at = thread.metrics.processed_at
    waiting_input = any(lag > 0 for lag in lags)
    return {"blocked_in": None if wait is None else wait.call,
            "blocked_on": None if wait is None else wait.waiting_for,
            "blocked_ms": None if wait is None else max(0, now_ms - wait.since_ms),
            "unprocessed_ms": max(0, now_ms - int(processed_at * 1000)) if waiting_input and processed_at else None}


def _generation(thread: StreamThreadView) -> int | None:
    consumer = thread.consumer
    if consumer is None:
        return None
    try:
        generation = consumer.group_metadata().generation_id
    except Exception:  # noqa: BLE001 - a closing consumer: no generation to report
        return None
    return generation if isinstance(generation, int) and generation >= 0 else None


def _thread_tasks(thread: StreamThreadView, now_ms: int, tracker: RestoreRateTracker | None,
                  observed: set[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The task entries of one stream thread (call with its ``tasks_lock`` held)."""
    reader = thread.changelog_reader
    by_task: dict[str, list[ChangelogProgressView]] = {}
    for entry in (reader.progress() if reader is not None else []):
        by_task.setdefault(str(entry.task_id), []).append(entry)
    # dict() copies in one step: the stream thread records sources outside tasks_lock
    sources = {str(t): s for t, s in dict(reader.restore_sources).items()} if reader is not None else {}
    # Tasks refused because their changelog lost their stores' state: reported even after the
    # thread died of it (the instance's last document says why it stopped).
    lost = dict(reader.lost_tasks) if reader is not None else {}
    taker = thread.snapshot_taker
    uploaded = dict(taker.last_uploaded) if taker is not None else {}
    tasks: list[dict[str, Any]] = [
        {"task_id": str(task_id), "role": entries[0].role, "state": STATE_LOST, "changelogs": [],
         "lost_changelogs": [entry.to_dict() for entry in entries]}
        for task_id, entries in sorted(lost.items())]
    for task_id, task in sorted(thread.tasks.items()):
        state = _task_state(task_id, task.state)
        if state is None or task_id in lost:
            continue
        key = str(task_id)
        tasks.append({"task_id": key, "role": "active", "state": state,
                      "changelogs": [_changelog_entry(e, key, now_ms, tracker, observed)
                                     for e in by_task.get(key, [])], **_restore_entry(sources.get(key)),
                      **_activity_entry(task, key, thread.consumer, now_ms, tracker, observed),
                      **_snapshot_entry(uploaded, key)})
    for task_id, standby in sorted(thread.standby_tasks.items()):
        state = _task_state(task_id, standby.state)
        if state is None or task_id in lost:
            continue
        key = str(standby.id)
        tasks.append({"task_id": key, "role": "warmup" if standby.warmup else "standby", "state": state,
                      "changelogs": [_changelog_entry(e, key, now_ms, tracker, observed)
                                     for e in by_task.get(key, [])],
                      **_restore_entry(sources.get(key)), **_snapshot_entry(uploaded, key)})
    return tasks


def status_document_from_instance(
    streams: InstanceView,
    instance_id: str,
    epoch: int,
    *,
    rate_tracker: RestoreRateTracker | None = None,
    now_ms: int | None = None,
    host: str | None = None,
    pid: int | None = None,
) -> dict[str, Any]:
    """The status document of a running ``KafkaStreams`` instance, read through the views
    of status/instance_view.py (safe from another thread: each thread's tasks are copied
    under its ``tasks_lock``). ``published_at`` is set to ``now_ms``; the publisher
    overwrites it when sending.
    """
    now = wall_clock_ms() if now_ms is None else now_ms
    observed: set[tuple[Any, ...]] = set()
    tasks: list[dict[str, Any]] = []
    threads: list[dict[str, Any]] = []
    generations: list[int] = []
    probes: list[int] = []
    for thread in list(streams.threads):
        generation = _generation(thread)
        if generation is not None:
            generations.append(generation)
        if thread.next_probing_rebalance_ms is not None:
            probes.append(thread.next_probing_rebalance_ms)
        # The thread changes its tasks and the reader's registrations under tasks_lock: copied
        # under it, a restoring task always comes with its changelog progress.
        with thread.tasks_lock:
            thread_tasks = _thread_tasks(thread, now, rate_tracker, observed)
        tasks += thread_tasks
        threads.append(_thread_entry(thread, thread_tasks, now, rate_tracker, observed))
    if rate_tracker is not None:
        rate_tracker.retain(observed)
    optional: dict[str, Any] = {"threads": threads}
    if streams.config.host_application is not None:
        optional["host_application"] = dict(streams.config.host_application)
    if streams.metrics_endpoint is not None:
        optional["metrics_endpoint"] = streams.metrics_endpoint
    return optional | {
        "format_version": document_format_version(task["state"] for task in tasks),
        "instance_id": instance_id,
        "application_id": streams.config.application_id,
        "state": str(streams.state.value),
        "epoch": epoch,
        "host": host if host is not None else socket.gethostname(),
        "pid": pid if pid is not None else os.getpid(),
        "process_id": str(streams.process_id),
        "processing_guarantee": _guarantee(streams.config),
        "generation": max(generations) if generations else None,
        "next_probing_rebalance_ms": min(probes) if probes else None,
        "published_at": now,
        "tasks": tasks,
        "acknowledgements": [],
    }


def _guarantee(config: InstanceConfigView) -> str:
    guarantee = config.processing_guarantee
    return str(guarantee.value if isinstance(guarantee, enum.Enum) else guarantee)
