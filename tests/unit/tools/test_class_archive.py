"""The broker's class archive is used only for the JVM and the jars it was made from."""

from __future__ import annotations

import os

from tools.kafka import class_archive


def _jvm_and_jars(tmp_path):
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "kafka.jar").write_bytes(b"classes")
    return str(java), lib


def test_an_archive_is_used_once_made_and_not_after_a_jar_changed(tmp_path):
    java, lib = _jvm_and_jars(tmp_path)
    assert class_archive.archive_options(java, lib) == []
    written = tmp_path / "written.jsa"
    written.write_bytes(b"archive")
    kept = class_archive.keep_archive(written, java, lib)
    assert class_archive.archive_options(java, lib) == [f"-XX:SharedArchiveFile={kept}"]
    stat = (lib / "kafka.jar").stat()
    os.utime(lib / "kafka.jar", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # re-resolved jar
    assert class_archive.archive_options(java, lib) == []


def test_a_new_archive_replaces_those_of_other_jvms(tmp_path):
    java, lib = _jvm_and_jars(tmp_path)
    (lib / ".classes-0123456789abcdef.jsa").write_bytes(b"an older JVM's")
    written = tmp_path / "written.jsa"
    written.write_bytes(b"archive")
    kept = class_archive.keep_archive(written, java, lib)
    assert sorted(lib.glob(".classes-*.jsa")) == [kept] and kept.read_bytes() == b"archive"
