"""A stream thread's snapshot taker and loader, built from the config (docs/snapshots.md)."""

from __future__ import annotations

from typing import cast

from airflow_stateful_provider.streams.config import ProcessingGuarantee, StreamsConfig
from airflow_stateful_provider.streams.snapshots.loading import SnapshotLoader
from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
from airflow_stateful_provider.streams.snapshots.taking import SnapshotTaker

__all__ = ["snapshot_clients"]


def snapshot_clients(config: StreamsConfig) -> tuple[SnapshotTaker | None, SnapshotLoader | None]:
    """(taker, loader) for ``config.snapshot_url``; (None, None) when snapshots are off."""
    if config.snapshot_url is None:
        return None, None
    storage = SnapshotStorage(config.snapshot_url, config.snapshot_storage_options)
    interval_ms = cast(int, config.snapshot_interval_ms)  # StreamsConfig.__post_init__ made it int ms
    taker = SnapshotTaker(storage, config.application_id, ProcessingGuarantee(config.processing_guarantee).value,
                          interval_ms=interval_ms, interval_commits=config.snapshot_interval_commits,
                          keep=config.snapshot_retention_count)
    return taker, SnapshotLoader(storage, config.application_id)
