"""OpenLineage datasets of the provider's operators.

The OpenLineage provider, when installed and configured, asks each operator for its
lineage (``get_openlineage_facets_on_start`` / ``_on_complete``). Names follow the
OpenLineage dataset naming spec: a Kafka topic is namespace ``kafka://<host:port>`` of the
first bootstrap server, name = the topic; a directory on a machine is namespace
``file://<hostname>``, name = its absolute path; an object store prefix is namespace
``<scheme>://<bucket>``, name = the path in it. A store is reported as its changelog topic
(what outlives the instances that hold it), or, for a stopped instance's state directory,
as its directory.

Lineage never fails a task: when it cannot be worked out (the topology does not import on
this worker, the connection is invalid) the operator logs why and reports no datasets.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["file_dataset", "kafka_namespace", "location_dataset", "operator_lineage", "topic_datasets"]


def kafka_namespace(bootstrap_servers: str | Sequence[str]) -> str:
    """``kafka://host:port`` of the first bootstrap server."""
    servers = bootstrap_servers.split(",") if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
    return f"kafka://{servers[0].strip()}"


def topic_datasets(bootstrap_servers: str | Sequence[str], topics: Iterable[str]) -> list[Any]:
    from airflow.providers.common.compat.openlineage.facet import Dataset

    namespace = kafka_namespace(bootstrap_servers)
    return [Dataset(namespace=namespace, name=topic) for topic in sorted(set(topics))]


def file_dataset(path: str | os.PathLike) -> Any:
    from airflow.providers.common.compat.openlineage.facet import Dataset

    return Dataset(namespace=f"file://{socket.gethostname()}", name=os.path.abspath(path))


def location_dataset(url: str) -> Any:
    """A snapshot location (``file:///mnt/snapshots/app``, ``s3://bucket/prefix/app``)."""
    from urllib.parse import urlsplit

    from airflow.providers.common.compat.openlineage.facet import Dataset

    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        return file_dataset(parts.path or url)
    return Dataset(namespace=f"{parts.scheme}://{parts.netloc}", name=parts.path.strip("/"))


def operator_lineage(inputs: Sequence[Any] = (), outputs: Sequence[Any] = ()) -> Any:
    """The ``OperatorLineage`` the OpenLineage provider expects (it is only called when that
    provider is installed)."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(inputs=list(inputs), outputs=list(outputs))
