"""What a stream thread's restore consumer (restoration and standby updates) is set to, on top
of the instance's consumer settings: one place, so what measures restoration outside a stream
thread (bench/snapshot_restore.py) reads the way a stream thread does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["RESTORE_FETCH_BYTES", "restore_consumer_settings"]

#: The restore consumer's ``max_partition_fetch_bytes`` unless ``consumer_configs`` set it.
#: kafka-python fetches a partition again only once its buffered records are used up, so a
#: restoring thread waits a round trip per fetch: 4 MiB fetches instead of the default 1 MiB
#: restored a 2M-key changelog 30 % faster (docs/benchmarks.md, "State at scale").
RESTORE_FETCH_BYTES = 4 << 20


def restore_consumer_settings(consumer_configs: Mapping[str, Any], exactly_once: bool) -> dict[str, Any]:
    """For an instance with these ``consumer_configs``: no group and no offset reset (the
    changelog reader assigns and seeks); a short fetch wait, as the restore consumer also
    answers the group leader's end-offset queries, which would otherwise wait behind an idle
    fetch for up to 500 ms; committed records only under exactly-once (restoration still ends
    at the log end: changelog_reader.py)."""
    settings: dict[str, Any] = {
        "group_id": None, "auto_offset_reset": "none", "enable_auto_commit": False, "fetch_max_wait_ms": 100,
        "max_partition_fetch_bytes": consumer_configs.get("max_partition_fetch_bytes", RESTORE_FETCH_BYTES)}
    if exactly_once:
        settings["isolation_level"] = "read_committed"
    return settings
