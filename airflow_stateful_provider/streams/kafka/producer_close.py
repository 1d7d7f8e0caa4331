"""Closing a producer stops it, whether or not what it holds could be delivered.

kafka-python 3.0.12's ``KafkaProducer.close(timeout)`` flushes first, and when the records
cannot be delivered within the timeout (every broker down, not enough in-sync replicas) it
raises before it stops the sender thread: that thread lives on, retrying and logging, for the
life of the process, and the error replaces whatever the caller's ``finally`` was raising.
``close_producer`` closes within the timeout and, when that fails, drops what is unsent and
stops the sender.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["close_producer", "discard_unsent_records"]

log = logging.getLogger(__name__)

#: How long a close waits once the unsent records were dropped: the sender thread only has
#: to notice and end.
_FORCED_CLOSE_S = 5.0


def close_producer(producer: Any, timeout_s: float) -> bool:
    """Close ``producer``, waiting up to ``timeout_s`` for what it holds to be delivered;
    returns whether it was. Never raises and never leaves the sender thread running: what
    was not delivered in time is dropped (the caller says what that means for it)."""
    try:
        producer.close(timeout=timeout_s)
        return True
    except Exception as exc:  # noqa: BLE001 - undelivered records (KafkaTimeoutError) or any close failure
        log.debug("producer close within %.1f s failed (%r); dropping what it holds", timeout_s, exc)
    discard_unsent_records(producer)
    try:
        producer.close(timeout=_FORCED_CLOSE_S)
    except Exception:  # reported: the thread was told to stop either way
        log.warning("a producer did not stop within %.0f s of dropping its unsent records", _FORCED_CLOSE_S,
                    exc_info=True)
    return False


def discard_unsent_records(producer: Any) -> None:
    """Make ``producer``'s sender thread stop without sending what it still holds, so that a
    following ``close()`` does not wait for them (a producer being discarded: its transaction
    failed or it never initialized, or its records could not be delivered in time).

    Checked against kafka-python 3.0.12: ``close()`` flushes first, and when records cannot
    be sent it raises before stopping the sender thread, which then keeps them until their
    delivery timeout; the sender's ``force_close()`` drops them. A producer without that
    sender is left as it is.
    """
    sender = getattr(producer, "_sender", None)
    if sender is not None:
        sender.force_close()
