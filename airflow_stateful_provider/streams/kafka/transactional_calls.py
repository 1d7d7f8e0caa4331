"""A KafkaProducer's transactional calls, each waiting at most a bound, and requests that
survive a coordinator going away.

kafka-python 3.0.12 waits without a bound on ``send_offsets_to_transaction``,
``commit_transaction`` and ``abort_transaction``; and its sender thread drops a
transactional request whose coordinator cannot be connected to (the network client's
``await_ready`` raises where the sender expects False), so after a broker that was a
group or transaction coordinator stops, that wait never ends. The engine calls these
functions instead (processing/streams_producer.py): a request keeps being retried against
the re-discovered coordinator, and a caller waits at most its bound, after which it
replaces the producer (whose ``init_transactions`` completes or aborts what was left).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka.errors import KafkaConnectionError, KafkaTimeoutError, RequestTimedOutError

__all__ = ["TransactionalCallTimeout", "abort_transaction_within", "commit_transaction_within",
           "coordinators", "keep_requests_of_unreachable_coordinators",
           "prepare_transactional_producer",
           "retry_timed_out_transactional_requests", "retry_transactional_requests_sooner",
           "send_offsets_to_transaction_within"]

#: How long the sender waits before sending a transactional request again: the Java client's
#: wait for a transaction's first partitions while the previous transaction still completes.
TRANSACTIONAL_RETRY_BACKOFF_MS = 20

#: How often a bounded wait tells its caller it is still waiting (``on_wait``).
WAIT_SLICE_SECONDS = 1.0


class TransactionalCallTimeout(KafkaTimeoutError):
    """A transactional call did not complete within its bound. ``call`` names it, and
    ``waited_for`` the coordinator it needs (e.g. "the group coordinator, broker 2")."""

    def __init__(self, call: str, timeout_ms: int, waited_for: str) -> None:
        super().__init__(f"{call} did not complete within {timeout_ms} ms (waiting for {waited_for})")
        self.call = call
        self.timeout_ms = timeout_ms
        self.waited_for = waited_for


def prepare_transactional_producer(producer: Any) -> None:
    """Everything the engine changes in a new transactional producer before its
    ``init_transactions``: requests of unreachable coordinators kept, timed-out requests sent
    again, and retries after 20 ms (the three functions below)."""
    keep_requests_of_unreachable_coordinators(producer)
    retry_timed_out_transactional_requests(producer)
    retry_transactional_requests_sooner(producer)


def keep_requests_of_unreachable_coordinators(producer: Any) -> None:
    """Make ``producer``'s sender retry a transactional request whose coordinator cannot be
    connected to, after looking the coordinator up again, instead of dropping it.

    Checked against kafka-python 3.0.12: ``Sender._maybe_send_pending_request`` asks
    ``client.await_ready(node)`` and, when it returns False, re-discovers the coordinator
    and re-queues the request; but ``KafkaNetClient.await_ready`` never returns False, it
    raises KafkaConnectionError, and the sender's handler for that re-discovers the
    coordinator without re-queuing: the request and the caller's wait on its result are
    lost. Here the producer's own client answers False, as the sender expects.
    """
    from kafka.errors import KafkaConnectionError

    sender = getattr(producer, "_sender", None)
    client = getattr(sender, "_client", None)
    if client is None or getattr(client, "_answers_not_ready", False):
        return
    raising = client.await_ready

    def await_ready(node_id: Any, timeout_ms: int = 30_000) -> bool:
        try:
            return bool(raising(node_id, timeout_ms=timeout_ms))
        except KafkaConnectionError:
            return False

    client.await_ready = await_ready
    client._answers_not_ready = True


def retry_timed_out_transactional_requests(producer: Any) -> None:
    """Make ``producer`` send a transactional request again, to its coordinator looked up
    anew, when the broker did not answer it within ``request_timeout_ms`` (a frozen or
    overloaded broker), as it does when the connection breaks; the caller's bound ends the
    wait. Without this, kafka-python 3.0.12 makes the producer's transaction state fatal
    ("Could not execute transactional request for unknown reasons: RequestTimedOutError"):
    a transactional producer starting while its coordinator does not answer failed at once
    instead of being retried.

    Checked against kafka-python 3.0.12: ``TxnRequestHandler.on_complete`` retries on
    KafkaConnectionError only; every handler goes through the transaction manager's
    ``_enqueue_request`` (queued, re-queued, retried), which here gives it an
    ``on_complete`` that hands a request timeout on as a broken connection.
    """
    manager = getattr(producer, "_transaction_manager", None)
    if manager is None or getattr(manager, "_retries_timed_out_requests", False):
        return
    enqueue = manager._enqueue_request

    def enqueue_retrying_timeouts(handler: Any) -> Any:
        if not getattr(handler, "_retries_timeouts", False):
            on_complete = handler.on_complete

            def on_complete_retrying(correlation_id: Any, response_or_exc: Any) -> Any:
                if isinstance(response_or_exc, RequestTimedOutError):
                    response_or_exc = KafkaConnectionError(f"no answer within request_timeout_ms: {response_or_exc}")
                return on_complete(correlation_id, response_or_exc)

            handler.on_complete = on_complete_retrying
            handler._retries_timeouts = True
        return enqueue(handler)

    manager._enqueue_request = enqueue_retrying_timeouts
    manager._retries_timed_out_requests = True


def retry_transactional_requests_sooner(producer: Any) -> None:
    """Make ``producer``'s sender wait TRANSACTIONAL_RETRY_BACKOFF_MS, not ``retry_backoff_ms``
    (100 ms), before it sends a transactional request again.

    The request retried most is a transaction's first AddPartitionsToTxn, refused with
    CONCURRENT_TRANSACTIONS while the coordinator still writes the previous transaction's
    markers: at every commit under exactly-once, more often on a replicated cluster, where the
    markers take longer. Its handler asks for a 20 ms wait, as the Java client's does, but
    kafka-python 3.0.12's ``Sender._maybe_send_pending_request`` sleeps the sender's own
    ``config['retry_backoff_ms']`` for every retried request; the sender reads that setting
    only there and as the timeout of its polls while a transactional request is in flight
    (which return on the response anyway).
    """
    sender = getattr(producer, "_sender", None)
    if sender is not None and sender.config.get("transaction_manager") is not None:
        sender.config["retry_backoff_ms"] = min(sender.config["retry_backoff_ms"], TRANSACTIONAL_RETRY_BACKOFF_MS)


def coordinators(producer: Any) -> dict[str, Any]:
    """The coordinators ``producer``'s transaction manager talks to now, by kind
    ("transaction", "group"): a broker id, or None while it looks one up.

    Checked against kafka-python 3.0.12 (``TransactionManager._transaction_coordinator``
    and ``_consumer_group_coordinator``)."""
    manager = getattr(producer, "_transaction_manager", None)
    if manager is None:
        return {}
    return {"transaction": getattr(manager, "_transaction_coordinator", None),
            "group": getattr(manager, "_consumer_group_coordinator", None)}


def _describe(producer: Any, kind: str) -> str:
    node = coordinators(producer).get(kind)
    return f"the {kind} coordinator, " + ("being looked up" if node is None else f"broker {node}")


def _wait(producer: Any, result: Any, call: str, timeout_ms: int, kind: str,
          on_wait: Callable[[str], None] | None) -> None:
    """Wait for a TransactionalRequestResult at most ``timeout_ms``; its error is raised."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        remaining = deadline - time.monotonic()
        if result.wait(timeout_ms=max(0, min(WAIT_SLICE_SECONDS, remaining)) * 1000):
            return
        if remaining <= 0:
            raise TransactionalCallTimeout(call, timeout_ms, _describe(producer, kind))
        if on_wait is not None:
            on_wait(_describe(producer, kind))


def send_offsets_to_transaction_within(producer: Any, offsets: Mapping[Any, Any], group_metadata: Any,
                                       timeout_ms: int, on_wait: Callable[[str], None] | None = None) -> None:
    """``producer.send_offsets_to_transaction(offsets, group_metadata)`` waiting at most
    ``timeout_ms`` (TransactionalCallTimeout); ``on_wait`` hears every second what it waits for
    (e.g. "the group coordinator, broker 2").

    Checked against kafka-python 3.0.12: the public call is the transaction manager's
    ``send_offsets_to_transaction``, a wakeup of the sender and an unbounded wait."""
    result = producer._transaction_manager.send_offsets_to_transaction(offsets, group_metadata)
    producer._sender.wakeup()
    _wait(producer, result, "send_offsets_to_transaction", timeout_ms, "group", on_wait)


def commit_transaction_within(producer: Any, timeout_ms: int, on_wait: Callable[[str], None] | None = None) -> None:
    """``producer.commit_transaction()`` waiting at most ``timeout_ms``
    (TransactionalCallTimeout). A commit that timed out cannot be asked again: its outcome
    is settled by the next ``init_transactions`` with the same transactional id.

    Checked against kafka-python 3.0.12: the public call is the transaction manager's
    ``begin_commit()``, a wakeup of the sender and an unbounded wait."""
    result = producer._transaction_manager.begin_commit()
    producer._sender.wakeup()
    _wait(producer, result, "commit_transaction", timeout_ms, "transaction", on_wait)


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
