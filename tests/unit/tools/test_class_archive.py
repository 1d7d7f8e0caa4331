"""A JVM class archive is used only for the JVM and the jars it was made from."""

from __future__ import annotations

import os

from tools.class_archive import ClassArchive


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
