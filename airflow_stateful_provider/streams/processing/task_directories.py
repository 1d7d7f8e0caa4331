"""Whether a task directory holds this application's state, checked before it is used.

A task directory is ``<state_dir>/<application_id>/<task_id>/`` (StreamsConfig.task_state_dir).
A directory copied from another application (or another task) would otherwise be trusted:
its stores would count on from the other application's state, and its checkpoint, naming
the other application's changelogs, would simply be ignored. So every task directory
records its identity (state/common/task_identity.py), and:

- a directory whose identity names another application or task, or logs a store to
  another changelog than this topology does, is refused with a :class:`ForeignStateError`;
- a directory written by an earlier build (no identity file) is adopted, unless its
  checkpoint names changelog partitions that belong to no store of this task: then it
  came from elsewhere and is refused the same way;
- stores the directory holds that the topology no longer gives this task, and stores it
  does not hold yet, are fine (the topology evolved): only conflicts are refused.

:func:`check_state_directory` runs when an instance starts, before anything is created on
the broker; :func:`claim_task_dir` runs when a task opens its stores, and writes the identity.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Sequence
from typing import Any

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import CorruptCheckpointError, ForeignStateError, TopologyError
from airflow_stateful_provider.streams.state.common.builder import StoreBuilder
from airflow_stateful_provider.streams.state.common.checkpoint import CHECKPOINT_FILE_NAME, read_checkpoint
from airflow_stateful_provider.streams.state.common.metadata import METADATA_FILE_NAME
from airflow_stateful_provider.streams.state.common.task_identity import TaskIdentity, read_identity, write_identity
from airflow_stateful_provider.streams.task_id import TaskId
from airflow_stateful_provider.streams.topology.store_builders import changelog_topic_name
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["check_state_directory", "claim_task_dir", "expected_identity", "is_persistent_store"]

log = logging.getLogger(__name__)


def is_persistent_store(builder: StoreBuilder, config: StreamsConfig, store_type: str | None = None) -> bool:
    """Whether the store keeps files in the task directory: ``store_type`` ("in_memory",
    "rocksdb") forces it; otherwise the builder's choice, or ``config.default_dsl_store``."""
    if store_type is not None:
        return store_type == "rocksdb"
    if builder.persistent is None:
        return config.default_dsl_store == "rocksdb"
    return bool(builder.persistent)


def expected_identity(topology: Topology, config: StreamsConfig, task_id: TaskId,
                      store_type: str | None = None) -> TaskIdentity:
    """What the directory of ``task_id`` must hold: this application, this task, and each
    persistent store of the task's subtopology with its changelog topic (None: not logged).
    A subtopology the topology does not have (any more) has no stores."""
    try:
        names = topology.subtopology(task_id.subtopology).store_names
    except TopologyError:
        names = ()
    stores: dict[str, str | None] = {}
    for name in names:
        builder = topology.store_builder(name)
        if is_persistent_store(builder, config, store_type):
            stores[name] = changelog_topic_name(config.application_id, name) if builder.logging_enabled else None
    return TaskIdentity(config.application_id, str(task_id), stores)


def claim_task_dir(task_dir: str, expected: TaskIdentity) -> None:
    """Refuse ``task_dir`` if it holds state of another application, task or changelog
    (ForeignStateError, nothing touched); otherwise record ``expected`` as its identity
    (when the task has persistent stores: a task without any has no directory)."""
    found, problem = _inspect(task_dir, expected)
    if problem is not None:
        raise foreign_state_error([(task_dir, problem)], expected)
    if expected.stores and (found is None or found != expected):
        os.makedirs(task_dir, exist_ok=True)
        write_identity(task_dir, expected)


def check_state_directory(topology: Topology, config: StreamsConfig) -> None:
    """Before an instance starts: refuse (ForeignStateError listing every offending
    directory) when a task directory under ``<state_dir>/<application_id>/`` holds state of
    another application or task. Entries not named like a task are not looked at."""
    app_dir = os.path.join(config.state_dir, config.application_id)
    try:
        entries = sorted(os.scandir(app_dir), key=lambda e: e.name)
    except FileNotFoundError:
        return
    problems: list[tuple[str, str]] = []
    expected = None
    for entry in entries:
        try:
            task_id = TaskId.parse(entry.name)
        except ValueError:
            continue
        if not entry.is_dir():
            continue
        expected = expected_identity(topology, config, task_id)
        problem = _inspect(entry.path, expected)[1]
        if problem is not None:
            problems.append((entry.path, problem))
    if problems and expected is not None:
        raise foreign_state_error(problems, expected)


def foreign_state_error(problems: Sequence[tuple[str, str]], expected: TaskIdentity) -> ForeignStateError:
    """The error for directories that hold someone else's state: each with why, and the fix."""
    app = expected.application_id
    first = problems[0][0]
    fix = (f"move it aside, e.g. `mv {shlex.quote(first)} {shlex.quote(first + '.foreign')}` (a name that is not a "
           f"task id is never read), or delete it, and start again: the task then restores its stores from "
           f"the changelogs of application {app!r}")
    if len(problems) == 1:
        problem = problems[0][1]
        return ForeignStateError(f"task directory {first} is foreign to application {app!r}: {problem}. It was "
                                 f"left untouched; {fix}.")
    listed = "\n".join(f"  {path}: {problem}" for path, problem in problems)
    return ForeignStateError(f"{len(problems)} task directories are foreign to application {app!r}:\n{listed}\n"
                             f"They were left untouched; for each, {fix}.")


def _inspect(task_dir: str, expected: TaskIdentity) -> tuple[TaskIdentity | None, str | None]:
    """(the identity found, why the directory is not ``expected``'s or None)."""
    try:
        found = read_identity(task_dir)
    except ForeignStateError as exc:
        return None, f"its identity file cannot be read, so whose state it holds cannot be told ({exc})"
    if found is not None:
        conflicts = []
        if found.application_id != expected.application_id or found.task_id != expected.task_id:
            conflicts.append(f"application {found.application_id!r}, task {found.task_id}")
        for store, topic in sorted(expected.stores.items()):
            theirs = found.stores.get(store)
            if store in found.stores and theirs != topic and theirs is not None and topic is not None:
                conflicts.append(f"store {store!r} logged to {theirs}")
        if not conflicts:
            return found, None
        return found, f"it holds state of {found.describe()}, expected {expected.describe()}"
    return None, _legacy_problem(task_dir, expected)


def _legacy_problem(task_dir: str, expected: TaskIdentity) -> str | None:
    """A directory of an earlier build (no identity file): whose changelogs its checkpoint names."""
    try:
        checkpoint = read_checkpoint(os.path.join(task_dir, CHECKPOINT_FILE_NAME))
    except CorruptCheckpointError:
        return None  # cannot tell; opening the task's stores reports the checkpoint
    if not checkpoint:
        return None
    task = TaskId.parse(expected.task_id)
    own = {topic for topic in expected.stores.values() if topic is not None}
    own.update(changelog_topic_name(expected.application_id, name) for name in _store_dirs(task_dir))
    foreign = sorted(f"{tp.topic}-{tp.partition}" for tp in checkpoint
                     if tp.topic not in own or tp.partition != task.partition)
    if not foreign:
        return None
    ours = sorted(f"{topic}-{task.partition}" for topic in own) or ["none"]
    return (f"it has no identity file (written by an earlier version) and its checkpoint names changelog "
            f"partition(s) {', '.join(foreign)}, which belong to no store of application "
            f"{expected.application_id!r} task {expected.task_id} (its changelog partitions: {', '.join(ours)})")


def _store_dirs(task_dir: str) -> list[str]:
    """Names of the store directories in ``task_dir``."""
    try:
        entries: list[Any] = list(os.scandir(task_dir))
    except OSError:
        return []
    return [e.name for e in entries if e.is_dir() and os.path.exists(os.path.join(e.path, METADATA_FILE_NAME))]
