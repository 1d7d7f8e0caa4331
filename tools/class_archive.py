"""Class-data-sharing archives of the JVMs the tools start (Kafka brokers, Spark), so each starts cheaper.

A JVM spends most of its start loading and verifying the same thousands of classes from its
jars, and the test suite starts many of them on two busy cores: broker and storage-tool JVMs
(single brokers, cluster nodes, nodes restarted beside running applications), spark-submit
drivers and Spark's daemons. A dynamic CDS archive (JDK 13+: ``-XX:ArchiveClassesAtExit`` once,
``-XX:SharedArchiveFile`` after) holds those classes parsed and verified. Measured on 2 cores
with the test suite's JVM options: a broker start with its storage format 3.8-4.4 CPU-s
instead of 6.1-6.6; a small PySpark job through spark-submit 9.9-10.5 CPU-s instead of
15.1-15.4.

An archive is only valid for the JVM and the jars it was made from; its name carries a
fingerprint of both, so a new JDK or other jars simply find no archive (and the JVM starts as
before) until ``make jars`` makes a new one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class ClassArchiveError(RuntimeError):
    """The JVM run to make an archive wrote none."""


@dataclass(frozen=True)
class ClassArchive:
    """The archive of ``name``'s classes for the JVM ``java`` and the jars in ``jars``, kept in ``directory``."""

    name: str
    java: str
    jars: Path
    directory: Path

    @property
    def path(self) -> Path:
        """Where the archive for this JVM and these jars is (or would be) kept."""
        digest = hashlib.sha256()
        binary = Path(os.path.realpath(self.java))
        for item in (binary, *sorted(binary.parent.parent.glob("lib/server/libjvm.so")),
                     *sorted(self.jars.glob("*.jar"))):
            stat = item.stat()
            digest.update(f"{item}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        return self.directory / f".{self.name}-classes-{digest.hexdigest()[:16]}.jsa"

    def options(self) -> list[str]:
        """The JVM option that uses the archive, or none while there is none for this JVM and these jars."""
        path = self.path
        return [f"-XX:SharedArchiveFile={path}"] if path.is_file() else []

    @staticmethod
    def dump_option(destination: Path) -> str:
        """The JVM option that writes the archive of the classes loaded until the JVM exits."""
        return f"-XX:ArchiveClassesAtExit={destination}"

    def make(self, run_dumping: Callable[[str], str]) -> Path:
        """The archive, made unless there is one: ``run_dumping(option)`` runs a JVM with the dump
        ``option`` to its exit and returns the tail of its output, which ClassArchiveError shows
        when the JVM wrote no archive (nothing is kept then)."""
        path = self.path
        if path.is_file():
            return path
        with tempfile.TemporaryDirectory(prefix=f"{self.name}-class-archive-") as scratch:
            written = Path(scratch) / "classes.jsa"
            output = run_dumping(self.dump_option(written))
            if not written.is_file():
                raise ClassArchiveError(f"the {self.name} JVM run to make the class archive wrote none at its exit:\n"
                                        f"{output}")
            return self.keep(written)

    def keep(self, written: Path) -> Path:
        """Move an archive a JVM wrote into its place (atomically on one file system: JVMs starting
        meanwhile see no archive or the whole one), removing this name's archives of other JVMs or jars."""
        path = self.path
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob(f".{self.name}-classes-*.jsa"):
            if stale != path:
                stale.unlink(missing_ok=True)
        staged = path.with_suffix(".partial")
        shutil.copyfile(written, staged)
        staged.replace(path)
        return path
