"""What an instance reports about itself: its status document, read from a running
``KafkaStreams`` and its threads, with a restore rate per changelog partition."""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.durations import duration_arg_ms
from airflow_stateful_provider.streams.status.document import (
    AT_LEAST_ONCE,
    STATE_LOST,
    TASK_STATES,
    document_format_version,
)
from airflow_stateful_provider.streams.task_id import TaskId

__all__ = ["RestoreRateTracker", "status_document_from_instance"]

log = logging.getLogger(__name__)


class RestoreRateTracker:
    """Offsets per second of each changelog partition over a sliding window.

    The rate is (newest position - oldest position) / elapsed time of the samples kept
    within ``window_ms``; it is 0.0 until two samples exist. A position that moves
    backwards (store wiped and restored from the beginning) restarts the window.
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


def _task_state(obj: Any) -> str | None:
    state = getattr(obj, "state", None)
    if state is None:
        return "running"
    name = str(getattr(state, "value", state)).lower()
    if name == "closed":
        return None
    if name not in TASK_STATES:
        log.warning("task %s reports state %r, which the status document cannot express; left out",
                    getattr(obj, "id", "?"), name)
        return None
    return name


def _changelog_entry(entry: Any, task_id: str, now_ms: int, tracker: RestoreRateTracker | None,
                     observed: set) -> dict[str, Any]:
    partition = entry.partition
    topic, number = partition[0], partition[1]
    current = getattr(entry, "position", None)
    if current is None:
        current = entry.current_offset
    key = (task_id, topic, number)
    observed.add(key)
    rate = tracker.observe(key, current, now_ms) if tracker is not None else 0.0
    return {"topic": topic, "partition": number,
            "store": getattr(entry, "store_name", None) or getattr(entry, "store"),
            "start_offset": entry.start_offset, "current_offset": current,
            "end_offset": getattr(entry, "end_offset", None), "restore_rate": max(0.0, rate)}


def _restore_entry(source: Any) -> dict[str, Any]:
    """``{"restore": ...}`` for a task whose restore source is known (optional field)."""
    if source is None:
        return {}
    return {"restore": source.as_dict()}


def _dropped_entry(task: Any) -> dict[str, Any]:
    """``{"dropped_records": {reason: count}}`` for a task that skipped records (optional field)."""
    dropped = getattr(getattr(task, "metrics", None), "dropped_records", None)
    return {"dropped_records": dict(dropped)} if dropped else {}


def _generation(thread: Any) -> int | None:
    consumer = getattr(thread, "consumer", None)
    if consumer is None:
        return None
    try:
        generation = consumer.group_metadata().generation_id
    except Exception:  # noqa: BLE001 - a closing consumer: no generation to report
        return None
    return generation if isinstance(generation, int) and generation >= 0 else None


def _thread_tasks(thread: Any, now_ms: int, tracker: RestoreRateTracker | None, observed: set) -> list[dict[str, Any]]:
    """The task entries of one stream thread (call with its ``tasks_lock`` held)."""
    reader = getattr(thread, "changelog_reader", None)
    by_task: dict[str, list[Any]] = {}
    for entry in (reader.progress() if reader is not None else []):
        by_task.setdefault(str(entry.task_id), []).append(entry)
    # dict() copies in one step: the stream thread records sources outside tasks_lock
    sources = {str(t): s for t, s in dict(getattr(reader, "restore_sources", None) or {}).items()}
    # Tasks refused because their changelog lost their stores' state: reported even after the
    # thread died of it (the instance's last document says why it stopped).
    lost = dict(getattr(reader, "lost_tasks", None) or {})
    tasks: list[dict[str, Any]] = [
        {"task_id": str(task_id), "role": entries[0].role, "state": STATE_LOST, "changelogs": [],
         "lost_changelogs": [entry.to_dict() for entry in entries]}
        for task_id, entries in sorted(lost.items(), key=lambda item: _sort_key(item[0]))]
    for task_id, task in sorted(thread.tasks.items(), key=lambda item: _sort_key(item[0])):
        state = _task_state(task)
        if state is None or task_id in lost:
            continue
        key = str(task_id)
        tasks.append({"task_id": key, "role": "active", "state": state,
                      "changelogs": [_changelog_entry(e, key, now_ms, tracker, observed)
                                     for e in by_task.get(key, [])], **_restore_entry(sources.get(key)),
                      **_dropped_entry(task)})
    warmup_ids = {str(t) for t in (getattr(thread, "warmup_tasks", None) or ())}
    standby_map = getattr(thread, "standby_tasks", None) or {}
    for task_id, standby in sorted(standby_map.items(), key=lambda item: _sort_key(item[0])):
        state = _task_state(standby)
        if state is None or task_id in lost:
            continue
        key = str(getattr(standby, "id", task_id))
        warmup = bool(getattr(standby, "warmup", False) or getattr(standby, "is_warmup", False)
                      or key in warmup_ids)
        own_progress = getattr(standby, "changelog_progress", None)
        entries = list(own_progress()) if callable(own_progress) else by_task.get(key, [])
        tasks.append({"task_id": key, "role": "warmup" if warmup else "standby", "state": state,
                      "changelogs": [_changelog_entry(e, key, now_ms, tracker, observed) for e in entries],
                      **_restore_entry(sources.get(key))})
    return tasks


def status_document_from_instance(
    streams: Any,
    instance_id: str,
    epoch: int,
    *,
    rate_tracker: RestoreRateTracker | None = None,
    now_ms: int | None = None,
    host: str | None = None,
    pid: int | None = None,
) -> dict[str, Any]:
    """The status document of a running ``KafkaStreams`` instance, read from its public
    attributes only (safe from another thread: each thread's tasks are copied under its
    ``tasks_lock``).

    Reads ``streams.state``, ``.config.application_id``, ``.process_id``, ``.threads``;
    per thread ``.tasks`` (StreamTask: ``.id``, ``.state``), ``.changelog_reader.progress()``,
    ``.consumer.group_metadata()`` (generation), ``.changelog_reader.lost_tasks`` (tasks whose
    changelog lost their state: ``state_lost``), and when present ``.standby_tasks``
    (TaskId -> standby with ``.id``, ``.state``, optional ``.warmup``/``.is_warmup`` and
    ``.changelog_progress()``), ``.warmup_tasks`` and ``.next_probing_rebalance_ms``.
    ``published_at`` is set to ``now_ms``; the publisher overwrites it when sending.
    """
    now = wall_clock_ms() if now_ms is None else now_ms
    observed: set = set()
    tasks: list[dict[str, Any]] = []
    generations: list[int] = []
    probes: list[int] = []
    own_probe = getattr(streams, "next_probing_rebalance_ms", None)
    if isinstance(own_probe, int):
        probes.append(own_probe)
    for thread in list(streams.threads):
        generation = _generation(thread)
        if generation is not None:
            generations.append(generation)
        probe = getattr(thread, "next_probing_rebalance_ms", None)
        if isinstance(probe, int):
            probes.append(probe)
        # The thread changes its tasks and the reader's registrations under tasks_lock: copied
        # under it, a restoring task always comes with its changelog progress.
        with getattr(thread, "tasks_lock", None) or contextlib.nullcontext():
            tasks += _thread_tasks(thread, now, rate_tracker, observed)
    if rate_tracker is not None:
        rate_tracker.retain(observed)
    state = getattr(streams.state, "value", streams.state)
    return {
        "format_version": document_format_version(task["state"] for task in tasks),
        "instance_id": instance_id,
        "application_id": streams.config.application_id,
        "state": str(state),
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


def _guarantee(config: Any) -> str:
    guarantee = getattr(config, "processing_guarantee", AT_LEAST_ONCE)
    return str(getattr(guarantee, "value", guarantee))


def _sort_key(task_id: Any) -> tuple:
    if isinstance(task_id, TaskId):
        return (task_id.subtopology, task_id.partition)
    return (10**9, str(task_id))
