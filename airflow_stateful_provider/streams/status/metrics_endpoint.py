"""An instance's own metrics endpoint (``StreamsConfig.metrics_port``): its last status
document as OpenMetrics text at ``http://<host>:<port>/metrics``.

For those who can reach the executors; everyone else scrapes the Airflow API server, which
serves the same families for every application from the status topic (docs/runbook.md). The
values are those of the instance's last published document (at most ``status_interval_ms``
old); standby lag is measured against the end offsets the standbys last saw, as no live end
offsets are fetched here.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.errors import ConfigError
from airflow_stateful_provider.streams.status.application import build_application_status
from airflow_stateful_provider.streams.status.document import DEFAULT_STALE_AFTER_MS, InstanceStatus
from airflow_stateful_provider.streams.status.metric_families import StatusReading, metric_families

__all__ = ["InstanceMetricsEndpoint"]

log = logging.getLogger(__name__)


class _LastDocumentCollector:
    """A prometheus_client collector of one instance's last document."""

    def __init__(self, application_id: str, last_document: Callable[[], InstanceStatus | None]) -> None:
        self.application_id = application_id
        self.last_document = last_document

    def collect(self) -> Any:
        document = self.last_document()
        now = wall_clock_ms()
        status = None if document is None else build_application_status(
            [document], {}, now, DEFAULT_STALE_AFTER_MS, application_id=self.application_id)
        error = "no status document published yet" if document is None else None
        return iter(metric_families([StatusReading(self.application_id, status, error)], now_ms=now))


class InstanceMetricsEndpoint:
    """Serves ``/metrics`` on ``port`` (0: any free port) from a daemon thread."""

    def __init__(self, application_id: str, port: int, last_document: Callable[[], InstanceStatus | None], *,
                 address: str = "0.0.0.0") -> None:
        self.application_id = application_id
        self.requested_port = port
        self.address = address
        self._collector = _LastDocumentCollector(application_id, last_document)
        self._server: Any = None
        self.url: str | None = None

    def start(self) -> str:
        """Listen; returns the endpoint's URL. A port that cannot be bound is a ConfigError
        naming it (raised before the instance creates anything on the brokers)."""
        from prometheus_client import start_wsgi_server
        from prometheus_client.registry import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self._collector)
        try:
            self._server, _thread = start_wsgi_server(self.requested_port, self.address, registry)
        except OSError as exc:
            raise ConfigError(f"metrics_port {self.requested_port}: cannot listen on {self.address}: "
                              f"{exc.strerror or exc} (another process or instance uses it? 0 takes any free "
                              f"port)") from None
        port = self._server.server_port
        self.url = f"http://{socket.gethostname()}:{port}/metrics"
        log.info("metrics of %s served at %s", self.application_id, self.url)
        return self.url

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
