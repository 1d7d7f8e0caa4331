"""The spark-submit job that writes Spark's class archive: a job that fails or does not end
within its bound is an error naming what happened, and no archive is kept."""

from __future__ import annotations

import functools
import time

import pytest

from tools.class_archive import ClassArchive, ClassArchiveError
from tools.spark_class_archive import run_job


def _archive(tmp_path) -> ClassArchive:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"classes")
    return ClassArchive("spark", str(java), jars, tmp_path / "archives")


def _submit(tmp_path, body: str) -> str:
    """A spark-submit stand-in: a shell script with ``body``."""
    script = tmp_path / "spark-submit"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_a_job_that_fails_is_an_error_with_its_exit_status_and_output(tmp_path):
    archive = _archive(tmp_path)
    submit = _submit(tmp_path, 'echo "Error: no master URL like $2" >&2; exit 3')

    with pytest.raises(ClassArchiveError, match="(?s)failed \\(exit 3\\):\nError: no master URL like local\\[2\\]"):
        archive.make(functools.partial(run_job, submit=submit))
    assert archive.options() == [] and not archive.directory.exists()


def test_a_job_that_does_not_end_is_killed_at_its_bound(tmp_path):
    archive = _archive(tmp_path)
    submit = _submit(tmp_path, "exec sleep 60")

    started = time.monotonic()
    with pytest.raises(ClassArchiveError, match="took more than 0.5 s \\(killed\\)"):
        archive.make(functools.partial(run_job, submit=submit, timeout_s=0.5))
    assert time.monotonic() - started < 30  # not the job's 60 s
    assert archive.options() == [] and not archive.directory.exists()


def test_a_job_that_ends_well_without_writing_the_archive_is_an_error_showing_its_output(tmp_path):
    archive = _archive(tmp_path)
    submit = _submit(tmp_path, 'echo "job done"')

    with pytest.raises(ClassArchiveError, match="(?s)wrote none at its exit:\njob done"):
        archive.make(functools.partial(run_job, submit=submit))
    assert archive.options() == []


def test_a_job_that_writes_the_archive_has_it_kept(tmp_path):
    archive = _archive(tmp_path)
    # the dump option reaches the JVM through SPARK_SUBMIT_OPTS, as spark-class passes it
    submit = _submit(tmp_path, 'path="${SPARK_SUBMIT_OPTS##*-XX:ArchiveClassesAtExit=}"; echo classes > "$path"')

    made = archive.make(functools.partial(run_job, submit=submit))
    assert made == archive.path and made.read_bytes() == b"classes\n"
