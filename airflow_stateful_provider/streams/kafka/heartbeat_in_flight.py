"""A consumer's poll waits for records while a heartbeat is in flight, instead of polling for
0 ms until the heartbeat is answered.

kafka-python 3.0.12's ``KafkaConsumer._poll_once`` caps its fetch wait by
``ConsumerCoordinator.time_to_next_poll``, the time to the next heartbeat. The heartbeat
loop runs on the client's IO thread: it sends a heartbeat, then awaits the answer for up to
``request_timeout_ms``. ``Heartbeat.time_to_next_heartbeat`` counts from the send and is 0 once
``heartbeat_interval_ms`` has passed, answered or not; so while a heartbeat waits on a
coordinator that does not answer (a frozen broker, a network that drops packets), each poll
turns into fetches with a 0 ms wait, handed to the IO thread and back, until the poll's
timeout: an exactly-once instance with its broker frozen used up to a whole core that way
for the heartbeat's 30 s, about half of it on the IO thread.

No heartbeat is due while one is in flight (the loop sends the next after the answer or the
failure), so here the coordinator's own view of the next heartbeat, the one only
``time_to_next_poll`` reads, is the heartbeat interval while one is in flight: the wait it
gives right after a send. kafka-python's ``time_to_next_poll`` still ends the wait for an
auto-commit that is due; a heartbeat that has failed or been answered counts as before, and
the heartbeat loop, which reads ``Heartbeat`` itself, is left as it is.
"""

from __future__ import annotations

from typing import Any

__all__ = ["heartbeat_in_flight", "poll_waits_while_heartbeat_in_flight"]


def heartbeat_in_flight(heartbeat: Any) -> bool:
    """Whether ``heartbeat`` (kafka-python's ``Heartbeat``) was sent and neither answered nor
    failed since: ``sent_heartbeat`` sets ``last_send`` and clears ``heartbeat_failed``,
    ``received_heartbeat`` sets ``last_receive``, ``fail_heartbeat`` sets ``heartbeat_failed``."""
    return heartbeat.heartbeat_failed is False and heartbeat.last_send > heartbeat.last_receive


def poll_waits_while_heartbeat_in_flight(consumer: Any) -> None:
    """Installed once per consumer; a consumer without a group has no coordinator to wrap.
    Checked against kafka-python 3.0.12: ``BaseCoordinator.time_to_next_heartbeat`` (infinite
    while the member has not joined, else ``Heartbeat.time_to_next_heartbeat``) is read only
    by ``ConsumerCoordinator.time_to_next_poll``, the poll's cap; the heartbeat loop reads
    ``Heartbeat.time_to_next_heartbeat`` directly."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or getattr(coordinator, "_waits_while_heartbeat_in_flight", False):
        return
    time_to_next_heartbeat = coordinator.time_to_next_heartbeat
    interval_s = coordinator.heartbeat.config["heartbeat_interval_ms"] / 1000

    def time_to_next_heartbeat_or_interval() -> float:
        seconds = time_to_next_heartbeat()
        if seconds == 0 and heartbeat_in_flight(coordinator.heartbeat):
            return interval_s
        return seconds

    coordinator.time_to_next_heartbeat = time_to_next_heartbeat_or_interval
    coordinator._waits_while_heartbeat_in_flight = True
