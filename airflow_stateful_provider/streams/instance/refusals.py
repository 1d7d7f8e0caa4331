"""The missing ACL a stream thread dies of (docs/deploying.md, "Least privilege").

The thread knows what it was doing when the brokers refused it: joining its group and
committing (Read on the group), exactly-once transactions (Write on its transactional id), a
failed send (Write on the topic: a ProductionError, or under exactly-once the transaction the
send failed), any other fetch (Read on the topic).
"""

from __future__ import annotations

from airflow_stateful_provider.streams.errors import ProductionError, TransactionFailedError
from airflow_stateful_provider.streams.kafka.authorization import missing_acl, refusal_in, refused_resource

__all__ = ["thread_refusal"]


def thread_refusal(exc: BaseException, application_id: str, transactional_id: str, thread: str) -> BaseException:
    """The AuthorizationError for ``exc`` (which holds a refusal of the brokers), or ``exc``
    when the refusal names no resource the thread uses."""
    refusal = refusal_in(exc)
    if refusal is None:
        return exc
    resource, names = refused_resource(refusal)
    if resource == "group":
        return missing_acl("group", names or (application_id,), "Read",
                           doing=f"joining the consumer group {application_id!r} and committing its offsets")
    if resource == "transactional id":
        return missing_acl("transactional id", names or (transactional_id,), "Write",
                           doing=f"exactly-once transactions of {thread}")
    if resource == "topic":
        if _while_sending(exc):
            return missing_acl("topic", names, "Write", doing=f"{thread} writing its output and changelogs")
        return missing_acl("topic", names, "Read", doing=f"{thread} reading its input and changelogs")
    if resource == "cluster":
        return missing_acl("cluster", names, "IdempotentWrite", doing=f"{thread}'s idempotent producer")
    return exc


def _while_sending(exc: BaseException | None) -> bool:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, (ProductionError, TransactionFailedError)):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
