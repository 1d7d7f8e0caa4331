"""Kafka clients that fail cleanly: construction that does not leak, errors that name the
brokers, the setting or the reason.

Everything that opens a short-lived client to read or send (status readers and publisher,
the control channel, the Airflow hook) builds it here. A secured connection that cannot
work fails before connecting when the cause is local (:func:`check_client_environment`),
and with the reason the brokers gave when it is not (:func:`connection_failures`): kafka-python
itself only logs them and, at its bootstrap timeout, says "Unable to bootstrap".
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.kafka.client_settings import client_kind, settings_for
from airflow_stateful_provider.streams.kafka.failed_metadata_refresh import retry_coordinator_lookup_on_metadata_failure
from airflow_stateful_provider.streams.kafka.heartbeat_in_flight import poll_waits_while_heartbeat_in_flight
from airflow_stateful_provider.streams.kafka.list_offsets import refresh_leaders_when_list_offsets_miss
from airflow_stateful_provider.streams.kafka.net_client import engine_net_client
from airflow_stateful_provider.streams.kafka.response_classes import install_response_classes_kept
from airflow_stateful_provider.streams.kafka.socket_reads import install_socket_reads

__all__ = ["check_client_environment", "connection_errors", "connection_failures", "construct_client",
           "describe_failures", "prepare_consumer", "servers_text"]

log = logging.getLogger(__name__)

#: A SASL mechanism kafka-python implements with a library of its own: (module, how to get it).
_SASL_LIBRARIES = {
    "GSSAPI": ("gssapi", "pip install gssapi (it builds against the MIT Kerberos libraries: krb5-config on PATH)"),
    "AWS_MSK_IAM": ("botocore", "pip install 'airflow-stateful-provider[msk-iam]'"),
}


def servers_text(servers: str | Sequence[str]) -> str:
    return servers if isinstance(servers, str) else ",".join(servers)


def connection_errors() -> tuple[type[BaseException], ...]:
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError

    return (KafkaConnectionError, KafkaTimeoutError)


def check_client_environment(settings: Mapping[str, Any], field: str = "client settings") -> None:
    """What a client of these settings needs on this machine: readable TLS files that fit
    together (the CA, the client certificate and key, the key's password), the library of
    the SASL mechanism, a token provider that imports. A ConfigError naming the setting."""
    from kafka import KafkaConsumer

    protocol = settings.get("security_protocol") or "PLAINTEXT"
    if protocol in ("SSL", "SASL_SSL") and settings.get("ssl_context") is None:
        _check_tls_files(settings, field)
    mechanism = settings.get("sasl_mechanism") if protocol.startswith("SASL_") else None
    if mechanism in _SASL_LIBRARIES:
        module, how = _SASL_LIBRARIES[mechanism]
        try:
            __import__(module)
        except (ImportError, OSError) as exc:
            raise ConfigError(f"{field}: sasl_mechanism {mechanism} needs the Python package {module!r}, which does "
                              f"not import here ({exc}): {how}") from None
    if mechanism == "AWS_MSK_IAM" and protocol != "SASL_SSL":
        raise ConfigError(f"{field}: sasl_mechanism AWS_MSK_IAM needs security_protocol SASL_SSL, got {protocol}")
    if mechanism == "GSSAPI" and not (settings.get("sasl_kerberos_service_name")
                                      or KafkaConsumer.DEFAULT_CONFIG.get("sasl_kerberos_service_name")):
        raise ConfigError(f"{field}: sasl_mechanism GSSAPI needs sasl_kerberos_service_name (usually 'kafka')")
    if mechanism == "OAUTHBEARER":
        from airflow_stateful_provider.streams.kafka.oauth_tokens import TokenProviderReference, token_provider

        value = settings.get("sasl_oauth_token_provider")
        if value is None:
            raise ConfigError(f"{field}: sasl_mechanism OAUTHBEARER needs sasl_oauth_token_provider (a token provider, "
                              f"or its import path 'package.module:attribute')")
        provider = token_provider(value)
        if isinstance(provider, TokenProviderReference):
            provider.resolve()


def _check_tls_files(settings: Mapping[str, Any], field: str) -> None:
    """Load the TLS material the way kafka-python will, one setting at a time, so an error
    names the setting and its file instead of failing every connection attempt."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for key in ("ssl_cafile", "ssl_crlfile"):
        path = settings.get(key)
        if path:
            try:
                context.load_verify_locations(cafile=path)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"{field}: {key} {path!r} cannot be used: {exc} (a PEM file readable here)") from None
    certfile, keyfile = settings.get("ssl_certfile"), settings.get("ssl_keyfile")
    if keyfile and not certfile:
        raise ConfigError(f"{field}: ssl_keyfile {keyfile!r} is given without ssl_certfile; set the client "
                          f"certificate too (kafka-python would ignore the key)")
    if certfile:
        password = settings.get("ssl_password")
        try:
            # A callable, so that OpenSSL never prompts on the terminal for an encrypted key's password.
            context.load_cert_chain(certfile, keyfile or None, password=lambda: password or "")
        except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
            raise ConfigError(f"{field}: ssl_certfile/ssl_keyfile cannot be read: {exc}") from None
        except OSError as exc:  # ssl.SSLError, or EINVAL for a key that does not decrypt
            key = f"ssl_keyfile {keyfile!r}" if keyfile else "its key (in the same file)"
            raise ConfigError(
                f"{field}: the client certificate ssl_certfile {certfile!r} and {key} cannot be loaded"
                f"{' with ssl_password' if password else ' without ssl_password'} ({exc}): a wrong or missing "
                f"ssl_password for an encrypted key, or a key that is not the certificate's") from None


@contextlib.contextmanager
def connection_failures(client_id: str | None = None) -> Iterator[list[str]]:
    """Collect why kafka-python's connections failed while the block runs (TLS handshakes,
    SASL authentication: it logs them at ERROR and retries until its bootstrap timeout),
    from the IO thread of the client ``client_id`` (any client's when None)."""
    install_socket_reads()  # else a failed authentication's answer can be lost
    found: list[str] = []
    thread_name = f"kafka-io-{client_id}" if client_id else None

    class Collector(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if thread_name is not None and record.threadName != thread_name:
                return
            message = record.getMessage()
            for marker in ("Connection failed: ", "Connection lost: "):
                if message.startswith(marker) or f": {marker}" in message:
                    reason = message.split(marker, 1)[1]
                    if reason not in found:
                        found.append(reason)

    handler = Collector(level=logging.ERROR)
    network_log = logging.getLogger("kafka.net")
    network_log.addHandler(handler)
    try:
        yield found
    finally:
        network_log.removeHandler(handler)


def describe_failures(failures: Sequence[str]) -> str:
    """``; connection attempts failed with: ...`` for an error message, "" when nothing was collected."""
    return f"; connection attempts failed with: {'; '.join(failures[-3:])}" if failures else ""


def prepare_consumer(consumer: Any) -> None:
    """The door's fixes a consumer gets once made (nothing for another client): its offset
    look-ups follow a moved leader (list_offsets.py), its group coordinator look-up waits
    out brokers that are down (failed_metadata_refresh.py), and its poll waits for records
    while a heartbeat is in flight (heartbeat_in_flight.py)."""
    refresh_leaders_when_list_offsets_miss(consumer)
    retry_coordinator_lookup_on_metadata_failure(consumer)
    poll_waits_while_heartbeat_in_flight(consumer)


def construct_client(client_class: Any, configs: Mapping[str, Any]) -> Any:
    """``client_class(**configs)``, closing the network client if the constructor fails:
    kafka-python 3 starts its IO thread before bootstrapping and leaves it running when
    the bootstrap times out, so every failed attempt (a sensor poking, ``--watch``)
    would leak a thread. ``kafka_client`` is the documented hook for the client factory;
    its default here is the engine's network client (net_client.py: metadata updates that
    survive a failed refresh, cheap socket look-ups).

    A consumer, producer or admin client gets only the settings it knows (one set of
    client configs serves all three); a setting no client knows is a ConfigError. The
    response class table is kept (response_classes.py) whichever factory makes the network
    client, the user's own included."""
    install_response_classes_kept()
    kind = client_kind(client_class)
    if kind is not None:
        configs = settings_for(kind, configs)
    check_client_environment(configs)

    factory = configs.get("kafka_client", engine_net_client)
    created: list[Any] = []

    def tracked(*args: Any, **kwargs: Any) -> Any:
        created.append(factory(*args, **kwargs))
        return created[-1]

    try:
        with connection_failures(configs.get("client_id")) as failures:
            client = client_class(**{**configs, "kafka_client": tracked})
        prepare_consumer(client)
        return client
    except connection_errors() as exc:
        _close(created, client_class)
        if failures:
            raise type(exc)(f"{exc}{describe_failures(failures)}") from exc
        raise
    except BaseException:
        _close(created, client_class)
        raise


def _close(created: list[Any], client_class: Any) -> None:
    for client in created:
        try:
            client.close()
        except Exception:  # already failing; the original error matters
            log.debug("closing the network client of a failed %s", client_class.__name__, exc_info=True)
