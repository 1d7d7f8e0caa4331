"""The Airflow connection of a snapshot location, as fsspec storage options (docs/snapshots.md).

Any connection works when its extra holds ``{"storage_options": {...}}``: those options go
to fsspec as they are (gcsfs, adlfs, hdfs ... take their own keys). An ``aws`` connection
also works without it, the way s3fs names things: login -> ``key``, password -> ``secret``,
extra ``aws_session_token`` -> ``token``, extra ``endpoint_url`` (or the host) and
``region_name`` -> ``client_kwargs``, ``profile_name`` -> ``profile``. An assumed role
(``role_arn``, ``assume_role_*``) is refused: its credentials expire within hours and the
instances upload for as long as the application runs; give the machines the role instead
(instance profile, IRSA) and leave the credentials out of the connection, so s3fs uses
theirs. The result holds secrets: it is handed to spark-submit in the environment
(``STATEFUL_STREAMS_SNAPSHOT_STORAGE_OPTIONS``), never as an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["get_snapshot_storage_options", "storage_options_from_connection"]


def storage_options_from_connection(conn: Any) -> dict[str, Any]:
    """fsspec storage options from an Airflow connection; ValueError naming the connection."""
    conn_id = getattr(conn, "conn_id", "?")
    extra = conn.extra_dejson or {}
    if not isinstance(extra, Mapping):
        raise ValueError(f"connection {conn_id!r}: extra must be a JSON object, got {type(extra).__name__}")
    explicit = extra.get("storage_options")
    if explicit is not None and not isinstance(explicit, Mapping):
        raise ValueError(f"connection {conn_id!r}: extra 'storage_options' must be a JSON object, "
                         f"got {type(explicit).__name__}")
    options: dict[str, Any] = {}
    if conn.conn_type == "aws":
        assumed = sorted(k for k in extra if k == "role_arn" or k.startswith("assume_role"))
        if assumed:
            raise ValueError(f"connection {conn_id!r}: {assumed} cannot be used for snapshot storage: credentials of "
                             f"an assumed role expire within hours, and the instances upload snapshots for as long as "
                             f"the application runs. Give the Spark executors the role (instance profile, IRSA) and "
                             f"remove the credentials from the connection, or use keys of a user (login, password)")
        if extra.get("profile_name"):
            options["profile"] = extra["profile_name"]
        if conn.login:
            options["key"] = conn.login
        if conn.password:
            options["secret"] = conn.password
        if extra.get("aws_session_token"):
            options["token"] = extra["aws_session_token"]
        client = {k: v for k, v in (("endpoint_url", extra.get("endpoint_url") or conn.host or None),
                                     ("region_name", extra.get("region_name"))) if v}
        if client:
            options["client_kwargs"] = client
    elif explicit is None:
        raise ValueError(f"connection {conn_id!r} of type {conn.conn_type!r}: put the fsspec storage options in its "
                         f"extra as {{\"storage_options\": {{...}}}} (only 'aws' connections are translated)")
    return {**options, **dict(explicit or {})}


def get_snapshot_storage_options(conn_id: str) -> dict[str, Any]:
    """Storage options of the Airflow connection ``conn_id``."""
    from airflow.sdk import BaseHook

    return storage_options_from_connection(BaseHook.get_connection(conn_id))
