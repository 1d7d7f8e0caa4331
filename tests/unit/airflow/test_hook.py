"""StatefulStreamsHook: client configs from connections, secret redaction, status and
control delegation, and the bounded connection test."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from unittest import mock

import pytest
from airflow.sdk import Connection

from airflow_stateful_provider.hooks.stateful_streams import (
    StatefulStreamsHook,
    client_configs_from_connection,
    redact_client_configs,
)

SECRET = "pa55-w0rd-never-logged"


def conn(**kwargs) -> Connection:
    extra = kwargs.pop("extra", None)
    return Connection(conn_id=kwargs.pop("conn_id", "streams"), conn_type="stateful_streams",
                      extra=None if extra is None else json.dumps(extra), **kwargs)


@pytest.fixture
def sasl_conn(monkeypatch):
    """``stateful_streams_default`` with SASL credentials, given as Airflow reads env connections."""
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT", json.dumps({
        "conn_type": "stateful_streams", "host": "127.0.0.1:1", "login": "alice", "password": SECRET,
        "extra": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512"}}))


def test_plaintext_host_list_becomes_bootstrap_servers():
    assert client_configs_from_connection(conn(host="b1:9092, b2:9093")) == {
        "bootstrap_servers": ["b1:9092", "b2:9093"], "security_protocol": "PLAINTEXT"}


def test_single_host_takes_the_port_and_extra_servers_may_be_a_list():
    assert client_configs_from_connection(conn(host="broker", port=9094))["bootstrap_servers"] == ["broker:9094"]
    configs = client_configs_from_connection(conn(extra={"bootstrap_servers": ["x:1", "y:2"]}))
    assert configs["bootstrap_servers"] == ["x:1", "y:2"]


def test_sasl_ssl_with_ca_file_and_ui_prefixed_extras():
    configs = client_configs_from_connection(conn(
        host="b:9093", login="alice", password=SECRET,
        extra={"extra__stateful_streams__security_protocol": "sasl_ssl", "sasl_mechanism": "plain",
               "ssl_cafile": "/etc/ca.pem", "extra__stateful_streams__sasl_mechanism": ""}))
    assert configs == {"bootstrap_servers": ["b:9093"], "security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                       "sasl_plain_username": "alice", "sasl_plain_password": SECRET, "ssl_cafile": "/etc/ca.pem"}


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, "has no bootstrap servers"),
    ({"host": "a:1", "extra": {"bootstrap_servers": "b:2"}}, "sets bootstrap servers twice"),
    ({"host": "a:1,b:2", "port": 9092}, "port 9092 applies to a single host"),
    ({"host": "a:1,,b:2"}, "empty entry"),
    ({"host": "a:1", "extra": {"security_protocol": "TLS"}}, "security_protocol must be one of"),
    ({"host": "a:1", "extra": {"security_protocol": "SASL_SSL"}, "login": "u", "password": SECRET},
     "needs sasl_mechanism"),
    ({"host": "a:1", "extra": {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}, "login": "u"},
     "missing ['password']"),
    ({"host": "a:1", "password": SECRET}, "sets ['password'] but security_protocol is PLAINTEXT"),
    ({"host": "a:1", "extra": {"ssl_cafile": "/ca.pem"}}, "sets ['ssl_cafile'] but security_protocol is PLAINTEXT"),
    ({"host": "a:1", "extra": {"security_protcol": "SSL"}}, "unknown extra field(s) ['security_protcol']"),
    # mutual TLS
    ({"host": "a:1", "extra": {"security_protocol": "SSL", "ssl_keyfile": "/k.pem"}},
     "ssl_keyfile needs ssl_certfile"),
    ({"host": "a:1", "extra": {"security_protocol": "SSL", "ssl_password": SECRET}},
     "ssl_password is the password of the client key: it needs ssl_certfile"),
    ({"host": "a:1", "extra": {"security_protocol": "SSL", "ssl_check_hostname": "sometimes"}},
     "ssl_check_hostname must be true or false, got 'sometimes'"),
    ({"host": "a:1", "extra": {"security_protocol": "SSL", "ssl_certfile": 5}}, "ssl_certfile must be a file path"),
    # OAUTHBEARER
    ({"host": "a:1", "extra": {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}},
     "needs exactly one of a token in password or a token provider in extra sasl_oauth_token_provider"),
    ({"host": "a:1", "password": SECRET, "extra": {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER",
                                                   "sasl_oauth_token_provider": "tokens:get"}}, "got both"),
    ({"host": "a:1", "login": "u", "password": SECRET,
      "extra": {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}},
     "['login'] cannot be used with sasl_mechanism OAUTHBEARER"),
    ({"host": "a:1", "extra": {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER",
                               "sasl_oauth_token_provider": "no-colon"}}, "must be 'package.module:attribute'"),
    ({"host": "a:1", "login": "u", "password": SECRET,
      "extra": {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_oauth_token_provider": "t:p"}},
     "['sasl_oauth_token_provider'] cannot be used with sasl_mechanism PLAIN"),
    # GSSAPI and AWS MSK IAM take no credentials from the connection
    ({"host": "a:1", "login": "u", "password": SECRET,
      "extra": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"}},
     "['login', 'password'] cannot be used with sasl_mechanism GSSAPI: Kerberos credentials come from"),
    ({"host": "a:1", "extra": {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                               "sasl_kerberos_service_name": "kafka"}, "login": "u", "password": SECRET},
     "['sasl_kerberos_service_name'] cannot be used with sasl_mechanism SCRAM-SHA-256"),
    ({"host": "a:1", "extra": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "AWS_MSK_IAM"}},
     "AWS_MSK_IAM needs security_protocol SASL_SSL, got SASL_PLAINTEXT"),
    ({"host": "a:1", "password": SECRET, "extra": {"security_protocol": "SASL_SSL", "sasl_mechanism": "AWS_MSK_IAM"}},
     "the AWS credentials come from the default chain"),
])
def test_bad_connections_are_named_precisely_without_the_password(kwargs, expected):
    with pytest.raises(ValueError) as info:
        client_configs_from_connection(conn(**kwargs))
    assert expected in str(info.value)
    assert "'streams'" in str(info.value)
    assert SECRET not in str(info.value)


def test_mutual_tls_settings_reach_kafka_python_with_the_key_password_hidden():
    configs = client_configs_from_connection(conn(host="b:9093", extra={
        "security_protocol": "SSL", "ssl_cafile": "/ca.pem", "ssl_certfile": "/client.pem",
        "ssl_keyfile": "/client-key.pem", "ssl_password": SECRET, "ssl_check_hostname": "false"}))
    assert configs == {"bootstrap_servers": ["b:9093"], "security_protocol": "SSL", "ssl_cafile": "/ca.pem",
                       "ssl_certfile": "/client.pem", "ssl_keyfile": "/client-key.pem", "ssl_password": SECRET,
                       "ssl_check_hostname": False}
    assert SECRET not in repr(configs) and redact_client_configs(configs)["ssl_password"] == "***"


def test_oauthbearer_takes_a_fixed_token_from_the_password_or_a_provider_path():
    from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

    fixed = client_configs_from_connection(conn(host="b:9093", password=SECRET, extra={
        "security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}))
    provider = fixed["sasl_oauth_token_provider"]
    assert isinstance(provider, AbstractTokenProvider) and provider.token() == SECRET
    assert SECRET not in repr(fixed)
    assert SECRET.encode() in SaslMechanismOAuth(**fixed).auth_bytes()  # what kafka-python sends
    by_path = client_configs_from_connection(conn(host="b:9093", extra={
        "security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": "tests.unit.airflow.test_hook:token_for_tests"}))
    assert by_path["sasl_oauth_token_provider"].token() == "token-from-a-function"


def token_for_tests() -> str:
    return "token-from-a-function"


def test_gssapi_and_msk_iam_name_no_credentials():
    assert client_configs_from_connection(conn(host="b:9093", extra={
        "security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "sasl_kerberos_domain_name": "example.com"})) == {
        "bootstrap_servers": ["b:9093"], "security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI",
        "sasl_kerberos_service_name": "kafka", "sasl_kerberos_domain_name": "example.com"}
    assert client_configs_from_connection(conn(host="b:9098", extra={
        "security_protocol": "SASL_SSL", "sasl_mechanism": "AWS_MSK_IAM"})) == {
        "bootstrap_servers": ["b:9098"], "security_protocol": "SASL_SSL", "sasl_mechanism": "AWS_MSK_IAM"}


def test_redaction_hides_only_secrets():
    configs = {"bootstrap_servers": ["a:1"], "sasl_plain_username": "alice", "sasl_plain_password": SECRET}
    assert redact_client_configs(configs) == {**configs, "sasl_plain_password": "***"}


def test_connection_from_env_and_the_password_never_leaks(sasl_conn, caplog):
    caplog.set_level(logging.DEBUG)
    hook = StatefulStreamsHook()
    configs = hook.get_client_configs()
    assert configs["sasl_plain_password"] == SECRET and configs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert hook.bootstrap_servers == ["127.0.0.1:1"]
    assert SECRET not in repr(hook) and SECRET not in str(hook.redacted_client_configs())
    ok, message = hook.test_connection(timeout=timedelta(milliseconds=600))
    assert ok is False
    assert "cannot reach Kafka at 127.0.0.1:1 within 600 ms" in message
    assert SECRET not in message
    assert SECRET not in caplog.text
    assert "127.0.0.1:1" in caplog.text  # the client did log: the check above is not vacuous


def test_async_configs_use_the_async_connection_lookup(sasl_conn):
    hook = StatefulStreamsHook()
    with mock.patch.object(StatefulStreamsHook, "get_connection", side_effect=AssertionError("sync lookup")):
        configs = asyncio.run(hook.aget_client_configs())
    assert configs["sasl_plain_username"] == "alice"


def test_invalid_connection_fails_test_connection_with_the_reason(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_BROKEN", json.dumps({"conn_type": "stateful_streams"}))
    ok, message = StatefulStreamsHook("broken").test_connection()
    assert ok is False and "has no bootstrap servers" in message


def test_get_status_delegates_with_security_configs_and_durations(sasl_conn):
    hook = StatefulStreamsHook()
    with mock.patch("airflow_stateful_provider.streams.status.reader.fetch_application_status") as fetch:
        result = hook.get_status("clicks", stale_after=timedelta(seconds=5), timeout=2, expected_tasks=["0_1"])
    assert result is fetch.return_value
    args, kwargs = fetch.call_args
    assert args == (["127.0.0.1:1"], "clicks")
    assert kwargs["stale_after_ms"] == 5_000 and kwargs["timeout_ms"] == 2_000
    assert kwargs["expected_tasks"] == ["0_1"]
    assert kwargs["client_configs"]["sasl_plain_password"] == SECRET
    assert "bootstrap_servers" not in kwargs["client_configs"]


def test_aget_status_runs_the_blocking_read_off_the_event_loop(sasl_conn):
    import threading

    loop_thread = []

    def fake_fetch(*args, **kwargs):
        loop_thread.append(threading.current_thread())
        return "status"

    async def read():
        loop_thread.append(threading.current_thread())
        return await StatefulStreamsHook().aget_status("clicks", timeout=1)

    with mock.patch("airflow_stateful_provider.streams.status.reader.fetch_application_status",
                    side_effect=fake_fetch):
        assert asyncio.run(read()) == "status"
    assert loop_thread[0] is not loop_thread[1]


@pytest.mark.parametrize(("bad", "message"), [
    (-1, "stale_after must be >= 0 s"),
    (True, "stale_after must be a number of seconds or a timedelta, got bool True"),
    ("5", "stale_after must be a number of seconds or a timedelta, got str '5'"),
])
def test_get_status_rejects_bad_durations(sasl_conn, bad, message):
    with pytest.raises(ValueError, match=message):
        StatefulStreamsHook().get_status("clicks", stale_after=bad)


@pytest.mark.parametrize(("given", "ms"), [(60, 60_000), (1.5, 1_500), (timedelta(minutes=2), 120_000)])
def test_every_hook_duration_is_seconds_or_a_timedelta(sasl_conn, given, ms):
    """Airflow's convention: timeout=60 is a minute (it used to be 60 ms)."""
    from airflow_stateful_provider.streams.control.commands import new_command

    hook = StatefulStreamsHook()
    with mock.patch("airflow_stateful_provider.streams.status.reader.fetch_application_status") as fetch:
        hook.get_status("clicks", stale_after=given, timeout=given)
        asyncio.run(hook.aget_status("clicks", stale_after=given, timeout=given))
    assert [(c.kwargs["stale_after_ms"], c.kwargs["timeout_ms"]) for c in fetch.call_args_list] == [(ms, ms)] * 2
    with mock.patch("airflow_stateful_provider.streams.status.reader.list_applications") as listing:
        hook.list_applications(timeout=given)
    assert listing.call_args.args[1] == ms
    with mock.patch("airflow_stateful_provider.streams.control.channel.wait_for_command") as wait:
        hook.wait_for_command(new_command("clicks", "checkpoint"), instances=["i-1"], timeout=given)
    assert wait.call_args.kwargs["timeout_ms"] == ms
    with mock.patch("airflow_stateful_provider.streams.queries.lookups.lookup_store") as lookup:
        hook.query_store("clicks", "counts", "k", timeout=given)
    assert lookup.call_args.kwargs["timeout_ms"] == ms


def test_the_password_prints_redacted_but_authenticates_with_its_value():
    from kafka.net.sasl.plain import SaslMechanismPlain

    configs = client_configs_from_connection(conn(host="b:1", login="alice", password=SECRET,
                                                  extra={"security_protocol": "SASL_PLAINTEXT",
                                                         "sasl_mechanism": "PLAIN"}))
    assert SECRET not in repr(configs) and SECRET not in f"{configs}"
    assert configs["sasl_plain_password"] == SECRET
    assert SaslMechanismPlain(**configs).auth_bytes() == f"alice\0alice\0{SECRET}".encode()


def test_send_command_builds_and_sends_through_the_control_channel(sasl_conn):
    from airflow_stateful_provider.streams.control.commands import ControlCommand

    with mock.patch("airflow_stateful_provider.streams.control.channel.send_command") as send:
        command = StatefulStreamsHook().send_command("clicks", "enforce_retention", instances=["i-1"],
                                                     stores=["counts"], now_ms=123)
    assert isinstance(command, ControlCommand)
    assert (command.application_id, command.command_type, command.instances, command.stores, command.now_ms) == \
        ("clicks", "enforce_retention", ("i-1",), ("counts",), 123)
    args, kwargs = send.call_args
    assert args == (["127.0.0.1:1"], command)
    assert kwargs["client_configs"]["sasl_mechanism"] == "SCRAM-SHA-512"


def test_unknown_command_type_is_refused_before_anything_is_sent(sasl_conn):
    from airflow_stateful_provider.streams.errors import StreamsError

    with mock.patch("airflow_stateful_provider.streams.control.channel.send_command") as send:
        with pytest.raises(StreamsError, match="unknown control command type 'vacuum'"):
            StatefulStreamsHook().send_command("clicks", "vacuum")
    send.assert_not_called()


def test_wait_for_command_delegates_with_the_timeout_as_ms(sasl_conn):
    from airflow_stateful_provider.streams.control.commands import new_command

    command = new_command("clicks", "checkpoint")
    with mock.patch("airflow_stateful_provider.streams.control.channel.wait_for_command") as wait:
        outcome = StatefulStreamsHook().wait_for_command(command, instances=("i-1", "i-2"),
                                                         timeout=timedelta(seconds=3))
    assert outcome is wait.return_value
    args, kwargs = wait.call_args
    assert args == (["127.0.0.1:1"], command)
    assert kwargs["instances"] == ["i-1", "i-2"] and kwargs["timeout_ms"] == 3_000
    assert "bootstrap_servers" not in kwargs["client_configs"]
