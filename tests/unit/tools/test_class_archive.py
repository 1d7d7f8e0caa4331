"""A JVM class archive is used only for the JVM and the jars it was made from, and made only
when the JVM run to make it wrote one."""

from __future__ import annotations

import os

import pytest

from tools.class_archive import ClassArchive, ClassArchiveError


def _archive(tmp_path, name: str = "kafka") -> ClassArchive:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True, exist_ok=True)
    java.write_text("#!/bin/sh\n")
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    (lib / "kafka.jar").write_bytes(b"classes")
    return ClassArchive(name, str(java), lib, tmp_path / "archives")


def _written(tmp_path, content: bytes = b"archive"):
    written = tmp_path / "written.jsa"
    written.write_bytes(content)
    return written


def test_an_archive_is_used_once_made_and_not_after_a_jar_changed(tmp_path):
    archive = _archive(tmp_path)
    assert archive.options() == []
    kept = archive.keep(_written(tmp_path))
    assert archive.options() == [f"-XX:SharedArchiveFile={kept}"] and kept.read_bytes() == b"archive"
    jar = archive.jars / "kafka.jar"
    stat = jar.stat()
    os.utime(jar, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # the jars resolved again
    assert archive.options() == []


def test_a_new_archive_replaces_its_name_s_archives_of_other_jvms_only(tmp_path):
    archive = _archive(tmp_path)
    archive.directory.mkdir()
    older, spark = archive.directory / ".kafka-classes-0123456789abcdef.jsa", \
        archive.directory / ".spark-classes-0123456789abcdef.jsa"
    older.write_bytes(b"an older JVM's")
    spark.write_bytes(b"another name's")
    kept = archive.keep(_written(tmp_path))
    assert sorted(archive.directory.iterdir()) == sorted([kept, spark])


def test_make_runs_the_jvm_only_without_an_archive_and_keeps_what_it_wrote(tmp_path):
    archive = _archive(tmp_path)
    runs = []

    def run_dumping(option: str) -> str:
        runs.append(option)
        written = option.removeprefix("-XX:ArchiveClassesAtExit=")
        with open(written, "wb") as out:
            out.write(b"classes")
        return "exited"

    made = archive.make(run_dumping)
    assert made == archive.path and made.read_bytes() == b"classes" and len(runs) == 1
    assert archive.make(run_dumping) == made and len(runs) == 1  # there is one now: no JVM runs


def test_a_jvm_that_wrote_no_archive_is_an_error_showing_its_output_and_nothing_is_kept(tmp_path):
    archive = _archive(tmp_path)

    with pytest.raises(ClassArchiveError, match="(?s)the kafka JVM .* wrote none at its exit:\nUnrecognized option"):
        archive.make(lambda option: "Unrecognized option")
    assert archive.options() == [] and not list(archive.directory.glob("*"))


def test_a_run_that_fails_keeps_nothing_and_removes_its_scratch_directory(tmp_path):
    archive = _archive(tmp_path)
    scratch = []

    def run_dumping(option: str) -> str:
        written = option.removeprefix("-XX:ArchiveClassesAtExit=")
        scratch.append(os.path.dirname(written))
        with open(written, "wb") as out:
            out.write(b"half an archive")
        raise OSError("the JVM could not be started")

    with pytest.raises(OSError, match="could not be started"):
        archive.make(run_dumping)
    assert archive.options() == [] and not os.path.exists(scratch[0])
