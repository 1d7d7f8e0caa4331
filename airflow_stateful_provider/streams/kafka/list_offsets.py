"""Offsets asked of a partition leader that moved: the consumer looks the leader up again.

kafka-python 3.0.12's ``KafkaConsumer.end_offsets`` / ``beginning_offsets`` (and the offset
look-ups of a reset) send ListOffsets to the partition's leader as the consumer's metadata
knows it. When the answer is NOT_LEADER_OR_FOLLOWER (a leader election: a broker restarted,
frozen or stopped) the fetcher sends the same request again at once, to the same broker,
without asking for new metadata: about 2,000 requests a second to the old leader until the
call's timeout, and again on every later call until the metadata refresh that comes every
``metadata_max_age_ms`` (5 minutes). A stream thread restoring a changelog saw its offsets
fail for minutes after the broker was back. Here the consumer asks for a metadata update
and waits its ``retry_backoff_ms`` before that retry, as the Java client does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["refresh_leaders_when_list_offsets_miss"]


def refresh_leaders_when_list_offsets_miss(consumer: Any) -> None:
    """Make ``consumer``'s ListOffsets retries ask for new metadata first (see module docstring).

    Checked against kafka-python 3.0.12: ``Fetcher._fetch_offsets_by_times_async`` retries
    the partitions that ``Fetcher._send_list_offsets_requests`` returns as to be retried
    without ``cluster.request_update()`` or a backoff; this wraps the latter on the
    consumer's fetcher. Installed once per consumer.
    """
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None or getattr(fetcher, "_refreshes_leaders", False):
        return
    send = fetcher._send_list_offsets_requests
    manager = fetcher._manager
    backoff_s = fetcher.config["retry_backoff_ms"] / 1000

    async def send_then_refresh(timestamps: Any) -> Any:
        offsets, retry = await send(timestamps)
        if retry:
            manager.cluster.request_update()
            await manager._net.sleep(backoff_s)
        return offsets, retry

    fetcher._send_list_offsets_requests = send_then_refresh
    fetcher._refreshes_leaders = True
