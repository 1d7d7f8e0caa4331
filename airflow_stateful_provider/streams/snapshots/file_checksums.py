"""How a snapshot's files are checked: CRC32C since manifest format 2, SHA-256 in format 1.

The checksum catches damage in storage or transfer (a cut-off upload, a flipped bit, a file
of another snapshot), not someone who can also rewrite the manifest. CRC32C is what Google
Cloud Storage and RocksDB's own file checksums use for that; computed by the processor it
reads about four times faster than SHA-256, which was over half of a large snapshot's load
time (docs/benchmarks.md, "State at scale"). Snapshots of format 1 keep their SHA-256.
"""

from __future__ import annotations

import hashlib
import re

import crc32c

__all__ = ["CHECKSUM_OF_FORMAT", "checksum_is_well_formed", "file_checksum"]

#: The checksum every file of a manifest of this format version carries.
CHECKSUM_OF_FORMAT = {1: "sha256", 2: "crc32c"}

_DIGEST = {"sha256": re.compile(r"^[0-9a-f]{64}$"), "crc32c": re.compile(r"^[0-9a-f]{8}$")}
_CHUNK = 1 << 20


def checksum_is_well_formed(algorithm: str, digest: str) -> bool:
    """Whether ``digest`` is a lowercase hex digest of ``algorithm``."""
    return bool(_DIGEST[algorithm].match(digest))


def file_checksum(path: str, algorithm: str) -> tuple[int, str]:
    """(size, lowercase hex ``algorithm`` digest) of the local file at ``path``."""
    digest = crc32c.CRC32CHash() if algorithm == "crc32c" else hashlib.new(algorithm)
    size = 0
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while read := handle.readinto(buffer):
            digest.update(view[:read])
            size += read
    return size, digest.hexdigest()
