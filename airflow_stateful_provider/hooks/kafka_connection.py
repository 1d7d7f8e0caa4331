"""The ``stateful_streams`` connection as kafka-python client settings.

==========================  =================================================================
bootstrap servers           ``host`` (``broker-1:9092,broker-2:9092``; a single host without a
                            port takes ``port``) or extra ``bootstrap_servers`` (string or list)
security protocol           extra ``security_protocol``: PLAINTEXT (default), SSL,
                            SASL_PLAINTEXT, SASL_SSL
TLS (SSL, SASL_SSL)         extras ``ssl_cafile`` (the brokers' CA), ``ssl_certfile`` and
                            ``ssl_keyfile`` (a client certificate: mutual TLS), ``ssl_password``
                            (of an encrypted key), ``ssl_check_hostname`` (default true)
SASL mechanism              extra ``sasl_mechanism``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
                            (``login`` and ``password``), OAUTHBEARER (a token in ``password``, or
                            extra ``sasl_oauth_token_provider``), GSSAPI (extras
                            ``sasl_kerberos_service_name``, ``sasl_kerberos_domain_name``; the
                            ticket comes from the machine), AWS_MSK_IAM (SASL_SSL; AWS
                            credentials from the machine's default chain)
==========================  =================================================================

Files named here (CA, certificate, key) must be readable wherever a client runs: Airflow
workers and triggerer, and the Spark driver and executors. Settings that would be silently
ignored (credentials a mechanism does not use, TLS files without TLS) and unknown extra keys
are errors: a typo must not turn into an anonymous connection. Secrets (the SASL password,
the token, the key password) are never logged and never in an error message or a repr.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CONN_TYPE", "EXTRA_KEYS", "SASL_MECHANISMS", "SECRET_CONFIG_KEYS", "SECURITY_PROTOCOLS",
           "client_configs_from_connection", "redact_client_configs"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", "AWS_MSK_IAM")
_TLS_KEYS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_check_hostname")
_KERBEROS_KEYS = ("sasl_kerberos_service_name", "sasl_kerberos_domain_name")
#: Extra keys a connection may hold; the UI may store them prefixed ``extra__stateful_streams__``.
EXTRA_KEYS = ("bootstrap_servers", "security_protocol", "sasl_mechanism", *_TLS_KEYS, "sasl_oauth_token_provider",
              *_KERBEROS_KEYS)
#: Client config keys whose values are secrets.
SECRET_CONFIG_KEYS = frozenset({"sasl_plain_password", "ssl_password"})
CONN_TYPE = "stateful_streams"
_REDACTED = "***"


class _Secret(str):
    """A password that is its own value to Kafka's SASL and TLS code but prints as ``'***'``
    wherever a config dict is formatted: kafka-python's admin client logs its whole
    configuration at DEBUG."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(_REDACTED)


def _extra_value(extra: Mapping[str, Any], key: str) -> Any:
    """An extra field, plain or with the UI's ``extra__<conn_type>__`` prefix; "" counts as unset."""
    for name in (key, f"extra__{CONN_TYPE}__{key}"):
        value = extra.get(name)
        if value not in (None, ""):
            return value
    return None


def _servers_from(conn_id: str, host: str | None, port: int | None, extra_servers: Any) -> list[str]:
    if host and extra_servers:
        raise ValueError(f"connection {conn_id!r} sets bootstrap servers twice: host {host!r} and extra "
                         f"'bootstrap_servers' {extra_servers!r}; keep one")
    if extra_servers:
        if isinstance(extra_servers, str):
            servers = [s.strip() for s in extra_servers.split(",")]
        elif isinstance(extra_servers, (list, tuple)) and all(isinstance(s, str) for s in extra_servers):
            servers = [s.strip() for s in extra_servers]
        else:
            raise ValueError(f"connection {conn_id!r}: extra 'bootstrap_servers' must be a string "
                             f"'host:port,host:port' or a list of strings, got {extra_servers!r}")
    elif host:
        servers = [s.strip() for s in host.split(",")]
        if port:
            if len(servers) != 1 or ":" in servers[0]:
                raise ValueError(f"connection {conn_id!r}: port {port} applies to a single host without a port, "
                                 f"but host is {host!r}; put the ports in the host list instead")
            servers = [f"{servers[0]}:{port}"]
    else:
        raise ValueError(f"connection {conn_id!r} has no bootstrap servers: set its host "
                         f"(e.g. 'broker-1:9092,broker-2:9092') or extra 'bootstrap_servers'")
    if any(not s for s in servers):
        raise ValueError(f"connection {conn_id!r}: empty entry in bootstrap servers {servers!r}")
    return servers


def _choice(conn_id: str, name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.upper() not in choices:
        raise ValueError(f"connection {conn_id!r}: {name} must be one of {list(choices)}, got {value!r}")
    return value.upper()


def _boolean(conn_id: str, name: str, value: Any) -> bool:
    """JSON true/false, or the strings a form or URI gives ("true", "false")."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"connection {conn_id!r}: {name} must be true or false, got {value!r}")


def client_configs_from_connection(conn: Any) -> dict[str, Any]:
    """kafka-python client configs from an Airflow connection (see the module docstring).

    Pure: takes any object with ``conn_id``, ``host``, ``port``, ``login``, ``password``
    and ``extra_dejson``, and opens no file (the files are checked where a client is built).
    Errors are ValueErrors naming the connection and the field, never a secret; passwords
    print as ``'***'``. An OAUTHBEARER token provider is a kafka-python provider object: a
    fixed token from the password, or a reference to ``sasl_oauth_token_provider``'s import
    path, imported when a client first authenticates.
    """
    conn_id = getattr(conn, "conn_id", None) or "<unnamed>"
    extra = conn.extra_dejson or {}
    if not isinstance(extra, Mapping):
        raise ValueError(f"connection {conn_id!r}: extra must be a JSON object, got {type(extra).__name__}")
    known = set(EXTRA_KEYS) | {f"extra__{CONN_TYPE}__{k}" for k in EXTRA_KEYS}
    unknown = sorted(k for k in extra if k not in known)
    if unknown:
        raise ValueError(f"connection {conn_id!r}: unknown extra field(s) {unknown}; supported: {list(EXTRA_KEYS)} "
                         f"(SASL username and password go in login and password)")
    values = {key: _extra_value(extra, key) for key in EXTRA_KEYS}
    configs: dict[str, Any] = {
        "bootstrap_servers": _servers_from(conn_id, conn.host, conn.port, values["bootstrap_servers"]),
    }
    protocol = _choice(conn_id, "security_protocol", values["security_protocol"] or "PLAINTEXT", SECURITY_PROTOCOLS)
    configs["security_protocol"] = protocol
    configs.update(_sasl_configs(conn_id, protocol, conn.login or None, conn.password or None, values))
    configs.update(_tls_configs(conn_id, protocol, values))
    return configs


def _sasl_configs(conn_id: str, protocol: str, login: str | None, password: str | None,
                  values: Mapping[str, Any]) -> dict[str, Any]:
    mechanism = values["sasl_mechanism"]
    provider_path = values["sasl_oauth_token_provider"]
    kerberos = {key: values[key] for key in _KERBEROS_KEYS if values[key] is not None}
    if not protocol.startswith("SASL_"):
        given = [name for name, value in (("sasl_mechanism", mechanism), ("login", login), ("password", password),
                                          ("sasl_oauth_token_provider", provider_path), *kerberos.items()) if value]
        if given:
            raise ValueError(f"connection {conn_id!r} sets {given} but security_protocol is {protocol}: SASL settings "
                             f"are only used with SASL_PLAINTEXT or SASL_SSL")
        return {}
    if mechanism is None:
        raise ValueError(f"connection {conn_id!r}: security_protocol {protocol} needs sasl_mechanism, one of "
                         f"{list(SASL_MECHANISMS)}")
    mechanism = _choice(conn_id, "sasl_mechanism", mechanism, SASL_MECHANISMS)
    configs: dict[str, Any] = {"sasl_mechanism": mechanism}

    def refuse(names: list[str], why: str) -> None:
        if names:
            raise ValueError(f"connection {conn_id!r}: {names} cannot be used with sasl_mechanism {mechanism}: {why}")

    if mechanism != "OAUTHBEARER":
        refuse(["sasl_oauth_token_provider"] if provider_path else [], "only OAUTHBEARER takes a token provider")
    if mechanism != "GSSAPI":
        refuse(sorted(kerberos), "only GSSAPI takes Kerberos settings")
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        missing = [name for name, value in (("login", login), ("password", password)) if not value]
        if missing:
            raise ValueError(f"connection {conn_id!r}: security_protocol {protocol} with {mechanism} needs the SASL "
                             f"username in login and the password in password; missing {missing}")
        configs.update(sasl_plain_username=login, sasl_plain_password=_Secret(password))
    elif mechanism == "OAUTHBEARER":
        from airflow_stateful_provider.streams.kafka.oauth_tokens import StaticTokenProvider, TokenProviderReference

        refuse(["login"] if login else [], "the token goes in password, or the provider in sasl_oauth_token_provider")
        if bool(password) == bool(provider_path):
            raise ValueError(f"connection {conn_id!r}: sasl_mechanism OAUTHBEARER needs exactly one of a token in "
                             f"password or a token provider in extra sasl_oauth_token_provider "
                             f"('package.module:attribute'), got {'both' if password else 'neither'}")
        try:
            configs["sasl_oauth_token_provider"] = (StaticTokenProvider(password) if password
                                                    else TokenProviderReference(provider_path))
        except Exception as exc:  # noqa: BLE001 - ConfigError of the engine: same message, the hook's error type
            raise ValueError(f"connection {conn_id!r}: {exc}") from None
    elif mechanism == "GSSAPI":
        refuse([n for n, v in (("login", login), ("password", password)) if v],
               "Kerberos credentials come from the machine's ticket cache or keytab (kinit)")
        configs.update({"sasl_kerberos_service_name": "kafka", **kerberos})
    else:  # AWS_MSK_IAM
        refuse([n for n, v in (("login", login), ("password", password)) if v],
               "the AWS credentials come from the default chain where each client runs (instance profile, "
               "IRSA, AWS_* environment variables), never from the connection")
        if protocol != "SASL_SSL":
            raise ValueError(f"connection {conn_id!r}: sasl_mechanism AWS_MSK_IAM needs security_protocol SASL_SSL, "
                             f"got {protocol}")
    return configs


def _tls_configs(conn_id: str, protocol: str, values: Mapping[str, Any]) -> dict[str, Any]:
    given = {key: values[key] for key in _TLS_KEYS if values[key] is not None}
    if not given:
        return {}
    if protocol not in ("SSL", "SASL_SSL"):
        raise ValueError(f"connection {conn_id!r} sets {sorted(given)} but security_protocol is {protocol}: TLS "
                         f"settings are only used with SSL or SASL_SSL")
    configs: dict[str, Any] = {}
    for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        if key in given:
            if not isinstance(given[key], str):
                raise ValueError(f"connection {conn_id!r}: {key} must be a file path string, got {given[key]!r}")
            configs[key] = given[key]
    if "ssl_keyfile" in configs and "ssl_certfile" not in configs:
        raise ValueError(f"connection {conn_id!r}: ssl_keyfile needs ssl_certfile (the client certificate it "
                         f"belongs to)")
    if "ssl_password" in given:
        if "ssl_certfile" not in configs:
            raise ValueError(f"connection {conn_id!r}: ssl_password is the password of the client key: it needs "
                             f"ssl_certfile (and ssl_keyfile when the key is in a file of its own)")
        if not isinstance(given["ssl_password"], str):
            raise ValueError(f"connection {conn_id!r}: ssl_password must be a string")
        configs["ssl_password"] = _Secret(given["ssl_password"])
    if "ssl_check_hostname" in given:
        configs["ssl_check_hostname"] = _boolean(conn_id, "ssl_check_hostname", given["ssl_check_hostname"])
    return configs


def redact_client_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """A copy safe to log: secret values replaced by ``***`` (a token provider prints its own
    redacted repr)."""
    return {key: (_REDACTED if key in SECRET_CONFIG_KEYS and value else value) for key, value in configs.items()}
