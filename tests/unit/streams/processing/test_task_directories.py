"""Whether a task directory holds this application's state (processing/task_directories.py):
own directories and earlier builds' directories are used, another application's or task's are
refused untouched, at start (check_state_directory) and when a task opens its stores."""

from __future__ import annotations

import os

import pytest

from airflow_stateful_provider.streams import ForeignStateError, Processor, Stores, StreamsConfig, Topology
from airflow_stateful_provider.streams.processing.record_collector import RecordCollector
from airflow_stateful_provider.streams.processing.state_manager import TaskStateManager
from airflow_stateful_provider.streams.processing.task_directories import (
    check_state_directory,
    claim_task_dir,
    expected_identity,
)
from airflow_stateful_provider.streams.state.common.checkpoint import CHECKPOINT_FILE_NAME, OffsetCheckpoint
from airflow_stateful_provider.streams.state.common.metadata import StoreMetadata, write_metadata
from airflow_stateful_provider.streams.state.common.task_identity import (
    IDENTITY_FILE_NAME,
    TaskIdentity,
    read_identity,
    write_identity,
)
from airflow_stateful_provider.streams.task_id import TaskId


class Count(Processor):
    def process(self, record):
        pass


def topology() -> Topology:
    """One subtopology with a logged persistent store, an unlogged one and an in-memory one."""
    built = Topology()
    built.add_source("source", "in", key_serde="string", value_serde="string")
    built.add_processor("count", Count, "source")
    for builder in (Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64"),
                    Stores.key_value_store_builder(Stores.persistent_key_value_store("seen"), "string", "int64")
                    .with_logging_disabled(),
                    Stores.key_value_store_builder(Stores.in_memory_key_value_store("cache"), "string", "int64")):
        built.add_state_store(builder, "count")
    return built


def config(tmp_path, app: str = "app") -> StreamsConfig:
    return StreamsConfig(application_id=app, bootstrap_servers="localhost:9092", state_dir=str(tmp_path))


OURS = TaskIdentity("app", "0_1", {"counts": "app-counts-changelog", "seen": None})


def snapshot(directory: str) -> dict[str, bytes]:
    """Every file below ``directory`` with its bytes (to prove nothing changed)."""
    found = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            found[os.path.relpath(path, directory)] = open(path, "rb").read()
    return found


def test_the_expected_identity_lists_the_persistent_stores_with_their_changelogs(tmp_path):
    assert expected_identity(topology(), config(tmp_path), TaskId(0, 1)) == OURS
    assert expected_identity(topology(), config(tmp_path), TaskId(0, 1), store_type="in_memory").stores == {}
    assert expected_identity(topology(), config(tmp_path), TaskId(7, 0)).stores == {}  # a subtopology gone


def test_a_new_directory_gets_the_identity_and_a_task_without_persistent_stores_no_directory(tmp_path):
    task_dir = str(tmp_path / "app" / "0_1")
    claim_task_dir(task_dir, OURS)
    assert read_identity(task_dir) == OURS
    claim_task_dir(task_dir, OURS)  # its own directory: fine
    in_memory = str(tmp_path / "app" / "0_2")
    claim_task_dir(in_memory, TaskIdentity("app", "0_2", {}))
    assert not os.path.exists(in_memory)


@pytest.mark.parametrize("theirs, what", [
    (TaskIdentity("other", "0_1", {"counts": "other-counts-changelog"}),
     "application 'other', task 0_1 (store 'counts' logged to other-counts-changelog)"),
    (TaskIdentity("app", "0_3", {"counts": "app-counts-changelog"}),
     "application 'app', task 0_3 (store 'counts' logged to app-counts-changelog)"),
    (TaskIdentity("app", "0_1", {"counts": "renamed-changelog"}),
     "application 'app', task 0_1 (store 'counts' logged to renamed-changelog)"),
])
def test_a_directory_of_another_application_task_or_changelog_is_refused_untouched(tmp_path, theirs, what):
    task_dir = str(tmp_path / "app" / "0_1")
    os.makedirs(task_dir)
    write_identity(task_dir, theirs)
    OffsetCheckpoint.in_task_dir(task_dir).write({("other-counts-changelog", 1): 41})
    before = snapshot(task_dir)
    with pytest.raises(ForeignStateError) as refused:
        claim_task_dir(task_dir, OURS)
    assert str(refused.value) == (
        f"task directory {task_dir} is foreign to application 'app': it holds state of {what}, expected "
        f"application 'app', task 0_1 (store 'counts' logged to app-counts-changelog, store 'seen' without "
        f"changelog). It was left untouched; move it aside, e.g. `mv {task_dir} {task_dir}.foreign` (a name that "
        f"is not a task id is never read), or delete it, and start again: the task then restores its stores from "
        f"the changelogs of application 'app'.")
    assert snapshot(task_dir) == before


def test_a_directory_of_an_earlier_build_is_adopted_when_its_checkpoint_names_its_own_changelogs(tmp_path):
    task_dir = str(tmp_path / "app" / "0_1")
    os.makedirs(os.path.join(task_dir, "retired"))
    write_metadata(os.path.join(task_dir, "retired"), StoreMetadata("keyvalue", "retired"))
    # its own store, and a store the topology no longer has (its directory is still there)
    OffsetCheckpoint.in_task_dir(task_dir).write({("app-counts-changelog", 1): 9, ("app-retired-changelog", 1): 4})
    claim_task_dir(task_dir, OURS)
    assert read_identity(task_dir) == OURS


@pytest.mark.parametrize("entry", [("other-counts-changelog", 1), ("app-counts-changelog", 0),
                                   ("app-unknown-changelog", 1)])
def test_a_directory_of_an_earlier_build_with_a_foreign_checkpoint_is_refused_untouched(tmp_path, entry):
    task_dir = str(tmp_path / "app" / "0_1")
    os.makedirs(task_dir)
    OffsetCheckpoint.in_task_dir(task_dir).write({entry: 9})
    before = snapshot(task_dir)
    with pytest.raises(ForeignStateError, match=(
            rf"it has no identity file \(written by an earlier version\) and its checkpoint names changelog "
            rf"partition\(s\) {entry[0]}-{entry[1]}, which belong to no store of application 'app' task 0_1 "
            rf"\(its changelog partitions: app-counts-changelog-1\)")):
        claim_task_dir(task_dir, OURS)
    assert snapshot(task_dir) == before and IDENTITY_FILE_NAME not in before


def test_an_unreadable_identity_file_is_refused_untouched(tmp_path):
    task_dir = str(tmp_path / "app" / "0_1")
    os.makedirs(task_dir)
    (tmp_path / "app" / "0_1" / IDENTITY_FILE_NAME).write_text("{")
    with pytest.raises(ForeignStateError, match=(
            rf"task directory {task_dir} is foreign to application 'app': its identity file cannot be read, so "
            rf"whose state it holds cannot be told \({task_dir}/{IDENTITY_FILE_NAME}: not valid JSON .*\)\. It was "
            rf"left untouched; move it aside")):
        claim_task_dir(task_dir, OURS)
    assert (tmp_path / "app" / "0_1" / IDENTITY_FILE_NAME).read_text() == "{"


def test_a_corrupt_checkpoint_is_left_to_the_state_manager(tmp_path):
    task_dir = str(tmp_path / "app" / "0_1")
    os.makedirs(task_dir)
    (tmp_path / "app" / "0_1" / CHECKPOINT_FILE_NAME).write_text("garbage\n")
    claim_task_dir(task_dir, OURS)  # the checkpoint's own reader reports it when the stores open
    assert read_identity(task_dir) == OURS


def test_the_start_check_lists_every_foreign_directory_and_skips_other_entries(tmp_path):
    cfg = config(tmp_path)
    app_dir = tmp_path / "app"
    for name, owner in (("0_0", "other"), ("0_1", "app"), ("0_2", "third"), ("0_0.foreign", "other"),
                        ("5_0", "app")):  # 5_0: a subtopology this topology no longer has
        os.makedirs(app_dir / name)
        write_identity(str(app_dir / name), TaskIdentity(owner, name.split(".")[0], {}))
    (app_dir / "notes.txt").write_text("not a task")
    with pytest.raises(ForeignStateError) as refused:
        check_state_directory(topology(), cfg)
    message = str(refused.value)
    assert message.startswith("2 task directories are foreign to application 'app':\n"
                              f"  {app_dir / '0_0'}: it holds state of application 'other', task 0_0, expected ")
    assert f"  {app_dir / '0_2'}: it holds state of application 'third', task 0_2, expected " in message
    assert "0_1:" not in message and "5_0" not in message and "0_0.foreign:" not in message
    assert message.endswith("They were left untouched; for each, move it aside, e.g. "
                            f"`mv {app_dir / '0_0'} {app_dir / '0_0'}.foreign` (a name that is not a task id is never "
                            "read), or delete it, and start again: the task then restores its stores from the "
                            "changelogs of application 'app'.")
    check_state_directory(topology(), config(tmp_path, app="fresh"))  # no directory yet: nothing to refuse


def test_a_task_refuses_a_foreign_directory_before_opening_any_store(tmp_path):
    cfg = config(tmp_path)
    collector = RecordCollector(None, task_id=TaskId(0, 1))
    task_dir = cfg.task_state_dir(TaskId(0, 1))
    os.makedirs(task_dir)
    write_identity(task_dir, TaskIdentity("other", "0_1", {"counts": "other-counts-changelog"}))
    manager = TaskStateManager(TaskId(0, 1), topology(), cfg, record_collector=collector)
    with pytest.raises(ForeignStateError, match="is foreign to application 'app'"):
        manager.initialize()
    assert os.listdir(task_dir) == [IDENTITY_FILE_NAME]  # no store was created in it

    os.remove(os.path.join(task_dir, IDENTITY_FILE_NAME))  # an empty directory is the task's own
    manager = TaskStateManager(TaskId(0, 1), topology(), cfg, record_collector=collector)
    manager.initialize()
    try:
        assert sorted(os.listdir(task_dir)) == ["counts", "seen", IDENTITY_FILE_NAME]
        assert read_identity(task_dir) == OURS
    finally:
        manager.close()
