"""A metadata refresh that fails (every broker down, a connection refused) is retried, never
fatal and never the end of metadata updates.

Two faults of kafka-python 3.0.12, both seen on the 3-node cluster with every broker killed:

- The client's metadata refresh loop (``ClusterMetadata._refresh_loop``) awaits a refresh
  another caller started without catching its failure: the loop ends, and since
  ``start_refresh_loop`` only starts a loop when none was started, the client never updates
  its metadata again. A partition whose leader then moves is fetched from the old leader
  forever: a stream thread RUNNING that processes nothing. Here ``start_refresh_loop``
  (which ``request_update`` calls) starts a new loop when the last one ended while the
  client is open.
- ``KafkaConsumer.poll`` looking up the group coordinator waits for a metadata update after a
  lookup that failed on metadata, catching only its timeout: the refresh's
  ``KafkaConnectionError`` escapes ``poll`` and kills the stream thread, where the Java client
  retries until the brokers answer. Here a retriable error of the look-up is retried after
  ``retry_backoff_ms`` within the caller's timeout, which then reports "not ready yet"
  (False) as a timeout does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["restart_refresh_loop_after_failure", "retry_coordinator_lookup_on_metadata_failure"]


def restart_refresh_loop_after_failure(cluster: Any) -> None:
    """Make ``cluster``'s ``start_refresh_loop`` start a new loop when the last one ended (the
    engine's network client does it to each client, net_client.py). Checked against
    kafka-python 3.0.12: ``ClusterMetadata.start_refresh_loop`` returns at once when
    ``_refresh_loop_future`` is set, even when that loop has ended."""
    if getattr(cluster, "_restarts_refresh_loop", False):
        return
    start = cluster.start_refresh_loop

    def start_again_if_ended() -> None:
        ended = cluster._refresh_loop_future
        if ended is not None and ended.is_done and not cluster.closed:
            cluster._refresh_loop_future = None
        start()

    cluster.start_refresh_loop = start_again_if_ended
    cluster._restarts_refresh_loop = True


def retry_coordinator_lookup_on_metadata_failure(consumer: Any) -> None:
    """Checked against kafka-python 3.0.12: ``BaseCoordinator.ensure_coordinator_ready_async``
    (what ``poll`` and the offset calls wait on) lets a failed metadata update raise. Installed
    once per consumer; a consumer without a group has no coordinator to wrap."""
    from kafka.errors import KafkaError
    from kafka.util import Timer

    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or getattr(coordinator, "_retries_metadata_failures", False):
        return
    ensure_ready = coordinator.ensure_coordinator_ready_async
    backoff_s = coordinator.config["retry_backoff_ms"] / 1000

    async def ready_or_retry(timeout_ms: float | None = None) -> bool:
        timer = Timer(timeout_ms)
        while True:
            try:
                return bool(await ensure_ready(timer.timeout_ms))
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                if timer.expired:
                    return False
                remaining = timer.timeout_secs
                await coordinator._manager._net.sleep(backoff_s if remaining is None else min(backoff_s, remaining))

    coordinator.ensure_coordinator_ready_async = ready_or_retry
    coordinator._retries_metadata_failures = True
