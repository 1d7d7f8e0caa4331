"""What a refusal of the brokers means: kafka-python's authorization errors as the ACL that is
missing (docs/deploying.md, "Least privilege").

kafka-python raises ``TopicAuthorizationFailedError`` with the topic name or a set of names,
``GroupAuthorizationFailedError`` with the group id, ``TransactionalIdAuthorizationFailedError``
and ``ClusterAuthorizationFailedError`` without a name; all derive from
``kafka.errors.AuthorizationError`` (checked against kafka-python 3.0.12). The caller knows
the operation it attempted (Read for a fetch, Write for a send, Create for a topic creation),
so it passes it; :func:`missing_acl` builds the error that names both.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafka.errors import AuthorizationError as KafkaAuthorizationError
from kafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)

from airflow_stateful_provider.streams.errors import AuthorizationError

__all__ = ["missing_acl", "refusal_in", "refused_resource"]

#: Error code of TOPIC_AUTHORIZATION_FAILED in a per-topic answer (describe_topics, create_topics).
TOPIC_AUTHORIZATION_FAILED = TopicAuthorizationFailedError.errno


def missing_acl(resource_type: str, names: Iterable[str], operation: str, *, doing: str) -> AuthorizationError:
    """The error for ``operation`` refused on ``names`` of ``resource_type`` while ``doing``."""
    names = tuple(sorted(set(names)))
    shown = ", ".join(repr(n) for n in names) if names else "(unnamed)"
    return AuthorizationError(
        f"not authorized: {doing} needs the ACL {operation} on {resource_type} {shown} for this client's principal "
        f"(grant it: docs/deploying.md, \"Least privilege\")",
        resource_type=resource_type, resource_names=names, operation=operation)


def refusal_in(exc: BaseException | None) -> KafkaAuthorizationError | None:
    """The first kafka-python authorization error in ``exc`` and its causes, or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KafkaAuthorizationError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def refused_resource(refusal: KafkaAuthorizationError) -> tuple[str, tuple[str, ...]]:
    """The resource type and names a kafka-python authorization error refers to."""
    argument = refusal.args[0] if refusal.args else None
    names: tuple[str, ...] = ()
    if isinstance(argument, str):
        names = (argument,)
    elif isinstance(argument, (set, frozenset, list, tuple)):
        names = tuple(sorted(str(n) for n in argument))
    if isinstance(refusal, TopicAuthorizationFailedError):
        return "topic", names
    if isinstance(refusal, GroupAuthorizationFailedError):
        return "group", names
    if isinstance(refusal, TransactionalIdAuthorizationFailedError):
        return "transactional id", names
    if isinstance(refusal, ClusterAuthorizationFailedError):
        return "cluster", ("kafka-cluster",)
    return "resource", names
