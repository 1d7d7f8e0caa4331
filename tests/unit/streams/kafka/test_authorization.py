"""kafka-python's authorization errors as the missing ACL (kafka/authorization.py) and as what a
stream thread dies of (instance/refusals.py)."""

from __future__ import annotations

import pytest
from kafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)

from airflow_stateful_provider.streams.errors import AuthorizationError, ProductionError, TransactionFailedError
from airflow_stateful_provider.streams.instance.refusals import thread_refusal
from airflow_stateful_provider.streams.kafka.authorization import missing_acl, refusal_in, refused_resource


def caused_by(outer: BaseException, cause: BaseException) -> BaseException:
    outer.__cause__ = cause
    return outer


def test_the_error_names_operation_resource_and_names():
    error = missing_acl("topic", ["b", "a", "a"], "Create", doing="creating topics")
    assert (error.operation, error.resource_type, error.resource_names) == ("Create", "topic", ("a", "b"))
    assert str(error).startswith("not authorized: creating topics needs the ACL Create on topic 'a', 'b' for")
    assert isinstance(error, PermissionError)


def test_a_refusal_is_found_through_the_causes_and_nothing_else_is_one():
    refusal = TopicAuthorizationFailedError({"t"})
    assert refusal_in(caused_by(ProductionError("send failed", topic="t"), refusal)) is refusal
    assert refusal_in(caused_by(ProductionError("send failed", topic="t"), KafkaTimeoutError())) is None
    assert refusal_in(None) is None


@pytest.mark.parametrize(("refusal", "expected"), [
    (TopicAuthorizationFailedError({"b", "a"}), ("topic", ("a", "b"))),
    (TopicAuthorizationFailedError("a"), ("topic", ("a",))),
    (GroupAuthorizationFailedError("app"), ("group", ("app",))),
    (TransactionalIdAuthorizationFailedError(), ("transactional id", ())),
    (ClusterAuthorizationFailedError(), ("cluster", ("kafka-cluster",))),
])
def test_the_resource_of_each_refusal(refusal, expected):
    assert refused_resource(refusal) == expected


@pytest.mark.parametrize(("error", "expected"), [
    (GroupAuthorizationFailedError("app"), ("group", ("app",), "Read")),
    (TransactionalIdAuthorizationFailedError(), ("transactional id", ("app-i-1",), "Write")),
    (TopicAuthorizationFailedError({"in"}), ("topic", ("in",), "Read")),
    (caused_by(ProductionError("send failed", topic="out"), TopicAuthorizationFailedError("out")),
     ("topic", ("out",), "Write")),
    (caused_by(TransactionFailedError("transaction failed"), TopicAuthorizationFailedError({"app-c"})),
     ("topic", ("app-c",), "Write")),
])
def test_what_a_thread_was_refused(error, expected):
    refused = thread_refusal(error, "app", "app-i-1", "thread-1")
    assert isinstance(refused, AuthorizationError)
    assert (refused.resource_type, refused.resource_names, refused.operation) == expected


def test_a_thread_error_without_a_refusal_is_kept():
    error = KafkaTimeoutError("slow")
    assert thread_refusal(error, "app", "app-i-1", "thread-1") is error
