"""kafka-python's client settings: which exist, for which client, and of which type.

StreamsConfig's ``client_configs``, ``consumer_configs``, ``producer_configs`` and
``admin_configs`` (and the CLI's ``--client-config`` file) are checked here, so a typo or a
value of the wrong type is a ConfigError naming the setting when the config is built, not a
``KafkaConfigurationError`` or a TypeError naming nothing, raised inside a stream thread
after the topics were created.

As Kafka Streams hands an unprefixed setting to every client it applies to, a
``client_configs`` setting goes to the clients that know it (``session_timeout_ms`` to the
consumers, ``linger_ms`` to the producers): :func:`settings_for`. A setting no kafka-python
client knows is an error everywhere, with the closest known name as a suggestion.
``sasl_oauth_token_provider`` may also be an import path (oauth_tokens.py), so JSON configs
can name one; :func:`settings_for` hands kafka-python the provider.
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_stateful_provider.streams.errors import ConfigError

__all__ = [
    "ADMIN",
    "CLIENT_KINDS",
    "CONSUMER",
    "PRODUCER",
    "check_client_settings",
    "check_consumer_timeouts",
    "check_engine_settings",
    "client_kind",
    "known_settings",
    "sasl_mechanisms",
    "settings_for",
]

CONSUMER, PRODUCER, ADMIN = "consumer", "producer", "admin"
CLIENT_KINDS = (CONSUMER, PRODUCER, ADMIN)

#: Settings the engine decides for its clients, and where the user decides them instead.
ENGINE_SETTINGS = {
    "bootstrap_servers": "set StreamsConfig.bootstrap_servers",
    "group_id": "the consumer group is the application_id",
    "group_instance_id": "set StreamsConfig.group_instance_id (each stream thread adds '-<thread index>')",
    "client_id": "the engine names every client after the application_id and the instance",
    "enable_auto_commit": "the engine commits offsets itself, together with the state they belong to",
    "auto_offset_reset": "the engine reads a new source partition from its earliest offset",
    "partition_assignment_strategy": "the engine's streams assignor distributes the tasks",
    "key_deserializer": "records reach the engine as bytes; give serdes (default_key_serde, Consumed)",
    "value_deserializer": "records reach the engine as bytes; give serdes (default_value_serde, Consumed)",
    "key_serializer": "the engine sends bytes; give serdes (default_key_serde, Produced)",
    "value_serializer": "the engine sends bytes; give serdes (default_value_serde, Produced)",
    "transactional_id": "set processing_guarantee='exactly_once_v2' and the engine gives each thread its own",
}
#: Under exactly-once the engine needs these values; any other is refused.
EXACTLY_ONCE_SETTINGS = {"enable_idempotence": True, "isolation_level": "read_committed"}

#: Settings whose value must be one of these.
_CHOICES: dict[str, tuple[Any, ...]] = {
    "acks": (0, 1, -1, "all"),
    "auto_offset_reset": ("earliest", "latest", "none"),
    "client_dns_lookup": ("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
    "compression_type": (None, "gzip", "snappy", "lz4", "zstd"),
    "isolation_level": ("read_uncommitted", "read_committed"),
    "security_protocol": ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
}
#: Settings whose kafka-python default is None, by the type a value must have (None allowed).
_STRING_SETTINGS = ("client_id", "group_id", "group_instance_id", "transactional_id", "sasl_plain_username",
                    "sasl_plain_password", "sasl_kerberos_domain_name", "ssl_cafile",
                    "ssl_certfile", "ssl_keyfile", "ssl_crlfile", "ssl_password", "ssl_ciphers", "proxy_url",
                    "socks5_proxy")
_COUNT_SETTINGS = ("receive_buffer_bytes", "send_buffer_bytes")
#: Never shown in a message.
_SECRET_SETTINGS = ("sasl_plain_password", "ssl_password")


@functools.cache
def known_settings(kind: str) -> frozenset[str]:
    """The setting names kafka-python's client of ``kind`` ("consumer", "producer", "admin") accepts."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    client = {CONSUMER: KafkaConsumer, PRODUCER: KafkaProducer, ADMIN: KafkaAdminClient}[kind]
    return frozenset(client.DEFAULT_CONFIG)


@functools.cache
def _defaults() -> dict[str, Any]:
    """Every client's defaults in one mapping (a setting two clients share has the same type in both)."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    merged: dict[str, Any] = {}
    for client in (KafkaAdminClient, KafkaProducer, KafkaConsumer):
        merged.update({k: v for k, v in client.DEFAULT_CONFIG.items() if v is not None or k not in merged})
    return merged


def client_kind(client_class: Any) -> str | None:
    """"consumer", "producer" or "admin" for kafka-python's client classes (and subclasses), else None."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    if not isinstance(client_class, type):
        return None
    for kind, base in ((CONSUMER, KafkaConsumer), (PRODUCER, KafkaProducer), (ADMIN, KafkaAdminClient)):
        if issubclass(client_class, base):
            return kind
    return None


def _kinds_of(key: str) -> list[str]:
    return [kind for kind in CLIENT_KINDS if key in known_settings(kind)]


def check_client_settings(settings: Mapping[str, Any], field: str, kinds: Iterable[str] = CLIENT_KINDS) -> None:
    """Every key of ``settings`` is a setting of one of the ``kinds`` of client and its value
    has the type kafka-python expects; else a ConfigError naming ``field`` and the setting."""
    kinds = tuple(kinds)
    for key, value in settings.items():
        owners = _kinds_of(key)
        if not owners:
            close = difflib.get_close_matches(key, sorted(_defaults()), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{field}: {key!r} is not a kafka-python client setting{hint}")
        if not set(owners) & set(kinds):
            where = " or ".join(f"{kind}_configs" for kind in owners)
            raise ConfigError(f"{field}: {key!r} is a {'/'.join(owners)} setting, not a {'/'.join(kinds)} one; "
                              f"put it in {where} (or client_configs)")
        problem = _value_problem(key, value)
        if problem is not None:
            shown = "***" if key in _SECRET_SETTINGS else repr(value)
            raise ConfigError(f"{field}: {key} {problem}, got {type(value).__name__} {shown}")


def _value_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` for ``key``, or None (settings holding objects are not checked)."""
    if key in _CHOICES:
        choices = _CHOICES[key]
        ok = any(value == c and type(value) is type(c) for c in choices)
        return None if ok else f"must be one of {list(choices)}"
    if key == "sasl_mechanism":
        mechanisms = sasl_mechanisms()
        return None if value is None or value in mechanisms else f"must be one of {sorted(mechanisms)}"
    if key == "sasl_oauth_token_provider":
        return None if value is None else _token_provider_problem(value)
    default = _defaults()[key]
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(default, int) or (default is None and key in _COUNT_SETTINGS):
        if value is None and default is None:
            return None
        return None if _is_int(value) and value >= 0 else "must be an int >= 0"
    if isinstance(default, float):  # retries and consumer_timeout_ms: a number, infinite by default
        number = _is_int(value) or (isinstance(value, float) and not math.isnan(value))
        return None if number and value >= 0 else "must be a number >= 0"
    if isinstance(default, str) or key in _STRING_SETTINGS:
        if value is None and default is None:
            return None
        return None if isinstance(value, str) else "must be a string"
    return None


def sasl_mechanisms() -> frozenset[str]:
    """The ``sasl_mechanism`` values kafka-python accepts: its ``kafka.net.sasl`` registry,
    not exported (checked against kafka-python 3.0.12)."""
    from kafka.net.sasl import SASL_MECHANISMS

    return frozenset(SASL_MECHANISMS)


def _token_provider_problem(value: Any) -> str | None:
    from airflow_stateful_provider.streams.kafka.oauth_tokens import TokenProviderReference, token_provider

    try:
        provider = token_provider(value)
        if isinstance(provider, TokenProviderReference):
            provider.resolve()
    except ConfigError as exc:
        return f"is not usable: {exc}"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_engine_settings(settings: Mapping[str, Any], field: str, *, exactly_once: bool) -> None:
    """Refuse the settings the engine decides for its clients (a value given there would be
    silently overridden, or would break the engine), naming what to set instead."""
    for key, value in settings.items():
        if key in ENGINE_SETTINGS:
            raise ConfigError(f"{field}: {key!r} cannot be set: {ENGINE_SETTINGS[key]}")
        if exactly_once and key in EXACTLY_ONCE_SETTINGS and value != EXACTLY_ONCE_SETTINGS[key]:
            raise ConfigError(f"{field}: {key}={value!r} contradicts processing_guarantee='exactly_once_v2', "
                              f"which needs {key}={EXACTLY_ONCE_SETTINGS[key]!r}; remove it")


def check_consumer_timeouts(settings: Mapping[str, Any], field: str) -> None:
    """kafka-python refuses a consumer unless fetch_max_wait_ms < request_timeout_ms <
    connections_max_idle_ms; check the consumers' effective settings up front."""
    defaults = _defaults()
    names = ("fetch_max_wait_ms", "request_timeout_ms", "connections_max_idle_ms")
    fetch, request, idle = (settings.get(name, defaults[name]) for name in names)
    if not fetch < request < idle:
        raise ConfigError(f"{field}: the consumers need fetch_max_wait_ms < request_timeout_ms < "
                          f"connections_max_idle_ms, got {fetch} / {request} / {idle}")


def settings_for(kind: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``settings`` the client of ``kind`` accepts: settings of other clients are
    left out; a setting no client knows is a ConfigError with a suggestion."""
    known = known_settings(kind)
    out = {}
    for key, value in settings.items():
        if key == "sasl_oauth_token_provider" and value is not None:
            from airflow_stateful_provider.streams.kafka.oauth_tokens import token_provider

            out[key] = token_provider(value)
        elif key in known:
            out[key] = value
        elif not _kinds_of(key):
            check_client_settings({key: value}, "kafka-python client settings")
    return out
