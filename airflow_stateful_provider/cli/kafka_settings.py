"""Where Kafka is and how to log in, for every command that talks to it: ``--conn-id`` (an
Airflow connection) or ``--bootstrap-servers`` with ``--client-config`` (or their environment
variables), checked before anything is sent."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

BOOTSTRAP_ENV = "STATEFUL_STREAMS_BOOTSTRAP_SERVERS"
CLIENT_CONFIG_ENV = "STATEFUL_STREAMS_CLIENT_CONFIG"


def add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conn-id", metavar="CONN_ID",
                        help="read the brokers and security settings from this Airflow connection (type "
                             "stateful_streams: environment, metadata database, secrets backend); needs Airflow")
    parser.add_argument("--bootstrap-servers", help=f"host:port[,host:port] (default ${BOOTSTRAP_ENV})")
    parser.add_argument("--client-config", metavar="FILE",
                        help="JSON object of kafka-python settings for secured clusters, e.g. security_protocol, "
                             f"sasl_mechanism, sasl_plain_username, sasl_plain_password, ssl_cafile "
                             f"(default ${CLIENT_CONFIG_ENV})")


def connection_settings(conn_id: str) -> tuple[str, dict[str, Any]]:
    """(bootstrap servers, client configs) of an Airflow connection; ConfigError naming it when
    Airflow is missing, the connection unknown or invalid. Airflow's own logging is quieted
    to errors (a warning would land on stdout, in the middle of --json)."""
    from airflow_stateful_provider.streams.errors import ConfigError

    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "ERROR")
    try:
        from airflow.models.connection import Connection

        from airflow_stateful_provider.hooks.stateful_streams import client_configs_from_connection
    except ImportError as exc:
        raise ConfigError(f"--conn-id {conn_id!r} needs Airflow on this machine ({exc}); give --bootstrap-servers "
                          f"and --client-config instead") from None
    try:
        configs = client_configs_from_connection(Connection.get_connection_from_secrets(conn_id))
    except Exception as exc:  # noqa: BLE001 - not found, a secrets backend refusing, a bad connection: named
        raise ConfigError(f"--conn-id {conn_id!r}: {exc} (looked in $AIRFLOW_CONN_{conn_id.upper()}, the metadata "
                          f"database of AIRFLOW_HOME={os.environ.get('AIRFLOW_HOME', '~/airflow')} and the "
                          f"configured secrets backend)") from None
    servers = configs.pop("bootstrap_servers")
    return ",".join(servers), configs


def json_object_file(path: str, option: str, what: str) -> dict[str, Any]:
    """A file holding a JSON object; raises ConfigError naming the option, the file and the problem."""
    from airflow_stateful_provider.streams.errors import ConfigError

    try:
        with open(path, encoding="utf-8") as handle:
            values = json.load(handle)
    except OSError as exc:
        raise ConfigError(f"{option} {path!r}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{option} {path!r} is not valid JSON: {exc}") from None
    if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
        raise ConfigError(f"{option} {path!r} must hold a JSON object of {what}, got {type(values).__name__}")
    return values


def client_configs_file(path: str | None) -> dict[str, Any]:
    """The --client-config file (bootstrap_servers in it is ignored: --bootstrap-servers says
    where); ConfigError naming the file and the setting when one is unknown or mistyped."""
    from airflow_stateful_provider.streams.kafka.client_settings import check_client_settings

    if not path:
        return {}
    values = json_object_file(path, "--client-config", "kafka-python settings")
    values.pop("bootstrap_servers", None)
    check_client_settings(values, f"--client-config {path!r}")
    return values


def check_bootstrap_servers(servers: str) -> None:
    from airflow_stateful_provider.streams.config import parse_bootstrap_servers
    from airflow_stateful_provider.streams.errors import ConfigError

    try:
        parse_bootstrap_servers(servers)
    except ConfigError as exc:
        raise ConfigError(f"--bootstrap-servers: {exc}") from None


def kafka_settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Sets ``args.bootstrap_servers`` and ``args.client_configs`` from --conn-id, or from
    --bootstrap-servers and --client-config (or their environment variables)."""
    if args.conn_id:
        given = [option for option, value in (("--bootstrap-servers", args.bootstrap_servers),
                                              ("--client-config", args.client_config)) if value]
        if given:
            parser.error(f"--conn-id {args.conn_id!r} says where Kafka is and how to log in; "
                         f"drop {' and '.join(given)}")
        args.bootstrap_servers, args.client_configs = connection_settings(args.conn_id)
        return
    args.bootstrap_servers = args.bootstrap_servers or os.environ.get(BOOTSTRAP_ENV)
    if not args.bootstrap_servers:
        parser.error(f"{args.command} needs --conn-id or --bootstrap-servers (or ${BOOTSTRAP_ENV})")
    check_bootstrap_servers(args.bootstrap_servers)
    args.client_configs = client_configs_file(args.client_config or os.environ.get(CLIENT_CONFIG_ENV))
