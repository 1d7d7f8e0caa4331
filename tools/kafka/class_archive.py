"""A class-data-sharing archive of the Kafka broker's classes, so each broker JVM starts cheaper.

A broker JVM spends most of its start loading and verifying the same few thousand classes
from ``lib/``; the test suite starts dozens of broker and storage-tool JVMs on two busy
cores (single brokers, cluster nodes, nodes restarted under running applications). A
dynamic CDS archive (JDK 13+: ``-XX:ArchiveClassesAtExit`` once, ``-XX:SharedArchiveFile``
after) holds those classes parsed and verified: a broker start costs about half the CPU
(6.8 against 3.5-3.9 CPU-s with its storage format, measured on 2 cores), and a node restarted
beside running applications is up sooner.

The archive is only valid for the JVM and the jars it was made from; its name carries a
fingerprint of both, so a new JDK or re-resolved jars simply find no archive (and the JVM
starts as before) until ``python -m tools.kafka.broker resolve`` makes a new one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def _fingerprint(java: str, lib: Path) -> str:
    """Digest of the JVM (its resolved binary and libjvm) and of every jar (name, size, mtime)."""
    digest = hashlib.sha256()
    binary = Path(os.path.realpath(java))
    for path in (binary, *sorted(binary.parent.parent.glob("lib/server/libjvm.so")), *sorted(lib.glob("*.jar"))):
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def archive_path(java: str, lib: Path) -> Path:
    """Where the archive for this JVM and these jars is (or would be) kept."""
    return lib / f".classes-{_fingerprint(java, lib)}.jsa"


def archive_options(java: str, lib: Path) -> list[str]:
    """The JVM option that uses the archive, or none while there is no archive for this JVM
    and these jars."""
    path = archive_path(java, lib)
    return [f"-XX:SharedArchiveFile={path}"] if path.is_file() else []


def dump_option(destination: Path) -> str:
    """The JVM option that writes the archive of the classes loaded until the JVM exits."""
    return f"-XX:ArchiveClassesAtExit={destination}"


def keep_archive(written: Path, java: str, lib: Path) -> Path:
    """Move an archive a JVM wrote into its place (atomically: JVMs starting meanwhile see the
    old one or the new one, never a part), removing archives of other JVMs or jars."""
    path = archive_path(java, lib)
    for stale in lib.glob(".classes-*.jsa"):
        if stale != path:
            stale.unlink(missing_ok=True)
    shutil.move(str(written), str(path))
    return path
