"""The .checkpoint file, docs/semantics.md §1 (and Kafka's OffsetCheckpoint parse rules)."""

from __future__ import annotations

import os

import pytest

from airflow_stateful_provider.streams.errors import CorruptCheckpointError
from airflow_stateful_provider.streams.state.common.checkpoint import (
    OFFSET_UNKNOWN,
    OffsetCheckpoint,
    read_checkpoint,
    write_checkpoint,
)
from airflow_stateful_provider.streams.topic_partition import TopicPartition


def _write_raw(tmp_path, text: str | bytes) -> str:
    path = tmp_path / ".checkpoint"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


# -- docs/semantics.md §1 examples -------------------------------------------------------------------


def test_example_known_and_unknown_offsets(tmp_path):
    path = _write_raw(tmp_path, "0\n2\nt 0 5\nt 1 -4\n")
    assert read_checkpoint(path) == {("t", 0): 5, ("t", 1): OFFSET_UNKNOWN}
    assert OFFSET_UNKNOWN == -4


def test_example_negative_offset_is_skipped_and_not_counted(tmp_path):
    path = _write_raw(tmp_path, "0\n2\nt 0 -1\nt 1 7\n")
    assert read_checkpoint(path) == {("t", 1): 7}


def test_example_count_mismatch_is_an_error(tmp_path):
    path = _write_raw(tmp_path, "0\n2\nt 0 5\n")
    with pytest.raises(CorruptCheckpointError, match="announces 2 valid entries but the file holds 1"):
        read_checkpoint(path)


def test_example_unknown_version_is_an_error(tmp_path):
    path = _write_raw(tmp_path, "1\n1\nt 0 5\n")
    with pytest.raises(CorruptCheckpointError, match="unknown checkpoint version 1"):
        read_checkpoint(path)


# -- the remaining parse rules ----------------------------------------------------------------


def test_missing_file_is_empty_map(tmp_path):
    assert read_checkpoint(tmp_path / "nope") == {}


@pytest.mark.parametrize(
    "line",
    ["t 0", "t 0 5 9", "", " t 0 5", "t\t0"],
    ids=["two-fields", "four-fields", "empty-line", "leading-space", "tab-two-fields"],
)
def test_line_without_exactly_three_fields_is_an_error(tmp_path, line):
    path = _write_raw(tmp_path, f"0\n1\n{line}\n")
    with pytest.raises(CorruptCheckpointError, match="line 3"):
        read_checkpoint(path)


def test_separators_are_any_whitespace_and_trailing_space_is_ignored(tmp_path):
    # Java's String.split("\\s+") drops trailing empty fields, not leading ones
    path = _write_raw(tmp_path, "0\r\n2\r\nt\t0   5  \r\nu 3 9\r\n")
    assert read_checkpoint(path) == {("t", 0): 5, ("u", 3): 9}


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "before the version line"),
        ("0\n", "before the entry count"),
        ("x\n0\n", "version 'x' is not an integer"),
        ("0\nx\n", "entry count 'x' is not an integer"),
        ("0\n1\nt x 5\n", "partition 'x' is not an integer"),
        ("0\n1\nt 0 5.0\n", "offset '5.0' is not an integer"),
        ("0\n1\nt 0 99999999999999999999\n", "out of range"),
        (b"0\n1\n\xff 0 5\n", "not UTF-8"),
    ],
)
def test_malformed_files_name_the_problem(tmp_path, text, match):
    path = _write_raw(tmp_path, text)
    with pytest.raises(CorruptCheckpointError, match=match) as info:
        read_checkpoint(path)
    assert path in str(info.value)


def test_duplicate_entries_count_once_so_the_count_mismatches(tmp_path):
    path = _write_raw(tmp_path, "0\n2\nt 0 5\nt 0 6\n")
    with pytest.raises(CorruptCheckpointError):
        read_checkpoint(path)


def test_all_invalid_offsets_skipped_gives_empty_map(tmp_path):
    path = _write_raw(tmp_path, "0\n2\nt 0 -2\nt 1 -3\n")
    assert read_checkpoint(path) == {}


def test_zero_entries(tmp_path):
    assert read_checkpoint(_write_raw(tmp_path, "0\n0\n")) == {}


# -- writing ---------------------------------------------------------------------------------


def test_write_then_read_round_trip(tmp_path):
    path = tmp_path / ".checkpoint"
    offsets = {TopicPartition("app-s-changelog", 0): 5, ("app-s-changelog", 1): OFFSET_UNKNOWN, ("x", 7): 0}
    write_checkpoint(path, offsets)
    assert read_checkpoint(path) == {("app-s-changelog", 0): 5, ("app-s-changelog", 1): -4, ("x", 7): 0}
    text = path.read_text()
    assert text.splitlines()[:2] == ["0", "3"]
    assert "app-s-changelog 1 -4" in text.splitlines()
    assert not (tmp_path / ".checkpoint.tmp").exists()


def test_write_replaces_atomically_via_tmp_file(tmp_path, monkeypatch):
    path = tmp_path / ".checkpoint"
    write_checkpoint(path, {("t", 0): 1})
    renames = []
    real_replace = os.replace

    def spy(src, dst):
        renames.append((os.path.basename(src), os.path.basename(dst), open(src).read()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    write_checkpoint(path, {("t", 0): 2})
    assert renames == [(".checkpoint.tmp", ".checkpoint", "0\n1\nt 0 2\n")]


def test_failed_write_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / ".checkpoint"
    write_checkpoint(path, {("t", 0): 1})

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        write_checkpoint(path, {("t", 0): 2})
    assert read_checkpoint(path) == {("t", 0): 1}


def test_empty_map_deletes_the_file(tmp_path):
    path = tmp_path / ".checkpoint"
    write_checkpoint(path, {("t", 0): 1})
    write_checkpoint(path, {})
    assert not path.exists()
    write_checkpoint(path, {})  # deleting a missing file is fine


@pytest.mark.parametrize(
    "offsets, match",
    [
        ({("t", 0): -1}, "offset -1"),
        ({("t", 0): -5}, "offset -5"),
        ({("t", 0): 1.5}, "offset 1.5"),
        ({("has space", 0): 1}, "topic 'has space'"),
        ({("", 0): 1}, "topic ''"),
        ({("t", -1): 1}, "partition -1"),
    ],
)
def test_write_refuses_values_it_could_not_read_back(tmp_path, offsets, match):
    path = tmp_path / ".checkpoint"
    with pytest.raises(CorruptCheckpointError, match=match):
        write_checkpoint(path, offsets)
    assert not path.exists()


def test_offset_checkpoint_object(tmp_path):
    checkpoint = OffsetCheckpoint.in_task_dir(tmp_path)
    assert checkpoint.path == str(tmp_path / ".checkpoint")
    assert checkpoint.read() == {}
    checkpoint.write({("t", 0): 3})
    assert checkpoint.read() == {("t", 0): 3}
    checkpoint.delete()
    checkpoint.delete()
    assert checkpoint.read() == {}
