"""Ending a KafkaProducer's work without waiting on records that may never be sent.

Under exactly-once a failed transaction is aborted, and a producer whose transaction state
is fatal is replaced (processing/streams_producer.py). kafka-python's own calls for both
wait without a bound while records of the transaction are still queued (for a deleted
topic: their delivery timeout, 2 minutes), which would stall the stream thread past the
transaction timeout.
"""

from __future__ import annotations

from typing import Any

__all__ = ["abort_transaction_within", "discard_unsent_records"]


def abort_transaction_within(producer: Any, timeout_ms: int) -> bool:
    """Abort ``producer``'s open transaction, waiting at most ``timeout_ms``; False when the
    abort did not complete in time (kafka-python's errors, such as a fatal transaction state,
    propagate).

    Checked against kafka-python 3.0.12: ``KafkaProducer.abort_transaction()`` is the
    transaction manager's ``begin_abort()``, a wakeup of the sender thread and an unbounded
    wait on the result; this is the same with a bounded wait. Past the transaction timeout
    the coordinator aborts the transaction itself, and a new producer with the same
    transactional id fences this one.
    """
    result = producer._transaction_manager.begin_abort()
    producer._sender.wakeup()
    return bool(result.wait(timeout_ms=timeout_ms))


def discard_unsent_records(producer: Any) -> None:
    """Make ``producer``'s sender thread stop without sending what it still holds, so that a
    following ``close()`` does not wait for them (a producer being discarded: its transaction
    failed or it never initialized).

    Checked against kafka-python 3.0.12: ``close()`` flushes first, and when records cannot
    be sent (those of a transaction lost to an epoch bump) it raises before stopping the
    sender thread, which then keeps them until their delivery timeout; the sender's
    ``force_close()`` drops them. A producer without that sender is left as it is.
    """
    sender = getattr(producer, "_sender", None)
    if sender is not None:
        sender.force_close()
