"""Secured client settings on the engine's side, without a broker: OAUTHBEARER token providers
given by import path, and the local checks that turn a TLS file or a SASL library that
cannot work into one ConfigError naming the setting (kafka-python would retry every
connection until its bootstrap timeout and say only "Unable to bootstrap")."""

from __future__ import annotations

import pickle

import pytest
from kafka.net.sasl.oauth import AbstractTokenProvider

from airflow_stateful_provider.streams import ConfigError, StreamsConfig
from airflow_stateful_provider.streams.kafka.client_settings import CONSUMER, settings_for
from airflow_stateful_provider.streams.kafka.clients import check_client_environment
from airflow_stateful_provider.streams.kafka.oauth_tokens import (
    StaticTokenProvider,
    TokenProviderReference,
    token_provider,
)
from tools.kafka.certificates import CertificateAuthority

HERE = "tests.unit.streams.kafka.test_client_security"


class ProviderForTests(AbstractTokenProvider):
    def token(self) -> str:
        return "token-from-a-class"


PROVIDER_INSTANCE = ProviderForTests()


def token_function() -> str:
    return "token-from-a-function"


def not_a_token() -> int:
    return 42


NOT_CALLABLE = "just a string"


@pytest.mark.parametrize("attribute, token", [("ProviderForTests", "token-from-a-class"),
                                               ("PROVIDER_INSTANCE", "token-from-a-class"),
                                               ("token_function", "token-from-a-function")])
def test_an_import_path_names_a_provider_class_instance_or_function(attribute, token):
    reference = token_provider(f"{HERE}:{attribute}")
    assert isinstance(reference, TokenProviderReference) and reference.token() == token
    assert reference.resolve() is token_provider(f"{HERE}:{attribute}").resolve()  # one provider per process
    assert pickle.loads(pickle.dumps(reference)) == reference  # travels to Spark executors as its path


@pytest.mark.parametrize("value, message", [
    ("no_colon", "must be 'package.module:attribute'"),
    ("no_such_module_here:provider", "cannot import 'no_such_module_here'"),
    (f"{HERE}:missing", "has no token provider class or instance, or function, named 'missing'"),
    (f"{HERE}:NOT_CALLABLE", "named 'NOT_CALLABLE'"),
    (42, "must be a kafka.net.sasl.oauth.AbstractTokenProvider or an import path"),
])
def test_a_bad_provider_is_named_when_the_config_is_built(value, message):
    with pytest.raises(ConfigError, match="sasl_oauth_token_provider") as info:
        StreamsConfig(application_id="a", bootstrap_servers="b:9092",
                      client_configs={"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER",
                                      "sasl_oauth_token_provider": value})
    assert message in str(info.value)


def test_a_function_returning_no_string_fails_naming_it():
    with pytest.raises(ConfigError, match=r"not_a_token' returned int, not a non-empty token string"):
        token_provider(f"{HERE}:not_a_token").token()


def test_clients_get_a_provider_object_for_a_path_and_objects_as_they_are():
    fixed = StaticTokenProvider("t0ken")
    assert settings_for(CONSUMER, {"sasl_oauth_token_provider": fixed})["sasl_oauth_token_provider"] is fixed
    by_path = settings_for(CONSUMER, {"sasl_oauth_token_provider": f"{HERE}:token_function"})
    assert by_path["sasl_oauth_token_provider"].token() == "token-from-a-function"
    assert "t0ken" not in repr(fixed) and pickle.loads(pickle.dumps(fixed)).token() == "t0ken"


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    ca = CertificateAuthority(tmp_path_factory.mktemp("tls"))
    other = CertificateAuthority(tmp_path_factory.mktemp("other"), name="other")
    return ca, ca.issue("client", password="k3y-pass"), other.issue("stranger")


def test_usable_tls_files_pass(tls):
    ca, client, _ = tls
    check_client_environment({"security_protocol": "SSL", "ssl_cafile": str(ca.cert), "ssl_certfile": str(client.cert),
                              "ssl_keyfile": str(client.key), "ssl_password": "k3y-pass"})


@pytest.mark.parametrize("change, message", [
    ({"ssl_cafile": "/nonexistent/ca.pem"}, "ssl_cafile '/nonexistent/ca.pem' cannot be used"),
    ({"ssl_password": "wrong"}, "cannot be loaded with ssl_password"),
    ({"ssl_password": None}, "a wrong or missing ssl_password for an encrypted key"),
    ({"ssl_keyfile": "STRANGER"}, "a key that is not the certificate's"),
    ({"ssl_certfile": None}, "ssl_keyfile"),
])
def test_tls_files_that_cannot_work_are_named_before_connecting(tls, change, message):
    ca, client, stranger = tls
    settings = {"security_protocol": "SASL_SSL", "ssl_cafile": str(ca.cert), "ssl_certfile": str(client.cert),
                "ssl_keyfile": str(client.key), "ssl_password": "k3y-pass", **change}
    if settings["ssl_keyfile"] == "STRANGER":
        settings["ssl_keyfile"] = str(stranger.key)
    with pytest.raises(ConfigError) as info:
        check_client_environment(settings, "client_configs")
    assert message in str(info.value) and str(info.value).startswith("client_configs: ")
    assert "k3y-pass" not in str(info.value)


def test_tls_files_are_not_looked_at_without_tls():
    check_client_environment({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                              "ssl_cafile": "/nonexistent/ca.pem"})


def test_oauthbearer_without_a_provider_and_a_provider_that_does_not_import_are_named():
    with pytest.raises(ConfigError, match="OAUTHBEARER needs sasl_oauth_token_provider"):
        check_client_environment({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER"})
    with pytest.raises(ConfigError, match="cannot import 'absent_token_module'"):
        check_client_environment({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
                                  "sasl_oauth_token_provider": "absent_token_module:get"})


def test_a_sasl_mechanism_without_its_library_says_what_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_gssapi(name, *args, **kwargs):
        if name == "gssapi":
            raise ImportError("No module named 'gssapi'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gssapi)
    with pytest.raises(ConfigError, match=r"GSSAPI needs the Python package 'gssapi'.*pip install gssapi"):
        check_client_environment({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI",
                                  "sasl_kerberos_service_name": "kafka"})
