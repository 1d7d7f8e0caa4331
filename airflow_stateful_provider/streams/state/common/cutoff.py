"""The retention cut-off marker: how a maintenance run's decision travels in a changelog.

``enforce_retention(now_ms)`` drops what is expired as of ``now_ms`` and moves the store's
observed stream time there. That decision is state: a store restored from its changelog
(a new instance, a wiped disk, a standby, a warmup, a snapshot plus the changelog's tail)
must reach it too, or it brings dropped sessions and versions back and answers late records
differently. So the active task writes one *cut-off marker* record into the store's
changelog partition, in its transaction (exactly-once) or before its commit (at-least-once);
a restore that reads the marker moves the store to ``max(observed, cut-off)`` exactly as the
maintenance run did, dropping the same segments (docs/maintenance.md, "The cut-off").

Record layout (the same for session and versioned changelogs, only the key differs):

- key: :data:`SESSION_CUTOFF_KEY` or :data:`VERSIONED_CUTOFF_KEY` (one fixed key per store
  kind, so a compacted changelog keeps the newest marker);
- value: UTF-8 JSON ``{"marker": "retention-cutoff", "format_version": 1, "cutoff_ms": N}``;
- timestamp: the wall clock when it is written (a cut-off may lie ahead, and brokers refuse
  timestamps more than an hour ahead; or far behind, and a session changelog's time retention
  would delete the marker before the records it judges).

Other engine versions: a reader older than the marker refuses the session marker (its window
``[-1, -1]`` is invalid: "expected 0 <= start <= end", naming the offset), and reads the
versioned marker as a put of a reserved key no serde produces at the marker's timestamp (the
wall clock of the run, which is ``N`` when the run used the wall clock): its observed stream
time moves there, close to what the cut-off does, and one extra row is kept. A reader finding a marker with a newer
``format_version`` than :data:`CUTOFF_FORMAT_VERSION` refuses it (upgrade the instance)
rather than guess.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from operator import attrgetter
from typing import Any

from airflow_stateful_provider.streams.errors import InvalidRecordError

__all__ = [
    "CUTOFF_FORMAT_VERSION",
    "CUTOFF_MARKER",
    "SESSION_CUTOFF_KEY",
    "VERSIONED_CUTOFF_KEY",
    "decode_cutoff",
    "encode_cutoff",
    "split_at_cutoffs",
]

#: Version of the marker layout written by this code; readers refuse newer ones.
CUTOFF_FORMAT_VERSION = 1
CUTOFF_MARKER = "retention-cutoff"
_RESERVED = b"\x00stateful-provider:retention-cutoff"
#: Marker key in a session changelog: the reserved name plus the window end -1, start -1.
SESSION_CUTOFF_KEY = _RESERVED + struct.pack(">qq", -1, -1)
#: Marker key in a versioned changelog.
VERSIONED_CUTOFF_KEY = _RESERVED
_record_key = attrgetter("key")


def encode_cutoff(cutoff_ms: int) -> bytes:
    """The marker's value for a cut-off at ``cutoff_ms``."""
    return json.dumps({"marker": CUTOFF_MARKER, "format_version": CUTOFF_FORMAT_VERSION, "cutoff_ms": cutoff_ms},
                      sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_cutoff(record: Any) -> int:
    """The cut-off a marker record carries; InvalidRecordError for a malformed or newer one."""
    where = f"retention cut-off marker at changelog offset {getattr(record, 'offset', -1)}"
    try:
        data = json.loads(record.value.decode("utf-8"))
    except (AttributeError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidRecordError(f"{where} is not UTF-8 JSON: {exc}; got {record.value!r:.120}") from None
    if not isinstance(data, dict) or data.get("marker") != CUTOFF_MARKER:
        raise InvalidRecordError(f"{where} is not a cut-off marker: {data!r:.120}")
    version = data.get("format_version")
    if type(version) is not int or version < 1:
        raise InvalidRecordError(f"{where} has format_version {version!r}; expected an int >= 1")
    if version > CUTOFF_FORMAT_VERSION:
        raise InvalidRecordError(f"{where} has format_version {version}, newer than the {CUTOFF_FORMAT_VERSION} "
                                 f"this engine understands: upgrade airflow-stateful-provider on this instance")
    cutoff = data.get("cutoff_ms")
    if type(cutoff) is not int or cutoff < 0:
        raise InvalidRecordError(f"{where} has cutoff_ms {cutoff!r}; expected an int >= 0")
    return cutoff


def split_at_cutoffs(records: Iterable[Any], marker_key: bytes) -> list[tuple[list[Any], int | None]]:
    """The records in runs between markers: ``(run, cut-off of the marker after it or None)``.
    Applying each run and then its cut-off, in order, replays the changelog as it was written.
    A batch without a marker (nearly all) is one run, found with one C-level scan of its keys."""
    records = records if isinstance(records, list) else list(records)
    keys = list(map(_record_key, records))
    if marker_key not in keys:
        return [(records, None)]
    runs: list[tuple[list[Any], int | None]] = []
    begin = 0
    for at, key in enumerate(keys):
        if key == marker_key:
            runs.append((records[begin:at], decode_cutoff(records[at])))
            begin = at + 1
    if begin < len(records):
        runs.append((records[begin:], None))
    return runs
