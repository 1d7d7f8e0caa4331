"""The plugin's FastAPI application, mounted on the Airflow API server at ``/stateful-streams``.

- ``GET /stateful-streams/``: the page (plugins/page.html), which fetches
  ``api/applications`` every ``ui_refresh_seconds`` and lays it out. Query parameters
  ``application_id``, ``conn_id`` (filters), ``max_lag`` (the standby-lag bound; default
  ``ui_max_standby_lag``) and ``refresh`` (seconds) are passed on by the page.
- ``GET /stateful-streams/api/applications``: the page's data (plugins/page_data.py).
- ``GET /stateful-streams/metrics``: every application's metrics in OpenMetrics text (or
  Prometheus text, as the scraper's Accept header asks), one target for all applications
  (streams/status/metric_families.py); ``application_id`` and ``conn_id`` narrow it (a
  Prometheus job's ``params``, to split a large cluster over several scrapes).

Airflow's auth applies: a request needs the token Airflow's login gives (the ``_token``
cookie of a browser session, or ``Authorization: Bearer``) of a user who may read
connections (the page shows brokers, hosts and what the applications do). A browser that is
not logged in is sent to Airflow's login page and back. The scrape endpoint also accepts
``Authorization: Bearer <[stateful_streams] metrics_token>``, a static secret for Prometheus
(Airflow's tokens expire).
"""

from __future__ import annotations

import hmac
import importlib.resources
import logging
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from airflow_stateful_provider.plugins.page_data import application_data, unreadable_application_data
from airflow_stateful_provider.plugins.status_board import SettingError, StatusBoard, setting
from airflow_stateful_provider.streams.clock import wall_clock_ms

__all__ = ["create_app"]

log = logging.getLogger(__name__)


async def _user(request: Request) -> Any:
    """The Airflow user of the request's token (header or cookie); 401 without one, 403 for a
    bad one, as Airflow's own endpoints answer."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.core_api.security import resolve_user_from_token

    header = request.headers.get("authorization", "")
    token = header[7:] if header.lower().startswith("bearer ") else request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    return await resolve_user_from_token(token)


def _may_read_connections(user: Any) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails

    return get_auth_manager().is_authorized_connection(method="GET", details=ConnectionDetails(), user=user)


async def requires_connection_reader(request: Request) -> None:
    """Dependency of the data endpoints: a user who may read connections."""
    if not _may_read_connections(await _user(request)):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden: the Stateful streams page needs permission to "
                                                       "read connections")


async def requires_scraper(request: Request) -> None:
    """Dependency of the scrape endpoint: the static metrics token, or a connection reader."""
    token = str(setting("metrics_token"))
    given = request.headers.get("authorization", "")
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return
    await requires_connection_reader(request)


def create_app(board: StatusBoard | None = None) -> FastAPI:
    """The plugin's application; ``board`` reads the statuses (tests give their own)."""
    board = board or StatusBoard()
    app = FastAPI(title="Stateful streams", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(SettingError)
    async def misconfigured(request: Request, exc: SettingError) -> JSONResponse:
        # the deployment's fault, said as it is (not a bare 500) to whoever can fix airflow.cfg
        log.error("%s", exc)
        return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_500_INTERNAL_SERVER_ERROR)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page(request: Request) -> Response:
        try:
            user = await _user(request)
        except HTTPException as exc:
            if exc.status_code == status.HTTP_401_UNAUTHORIZED:
                return RedirectResponse(_login_url(str(request.url)), status_code=status.HTTP_307_TEMPORARY_REDIRECT)
            raise
        if not _may_read_connections(user):
            return HTMLResponse("<h1>Forbidden</h1><p>The Stateful streams page shows what the Kafka connections "
                                "reach: it needs permission to read connections.</p>", status_code=403)
        html = importlib.resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})

    @app.get("/api/applications", dependencies=[Depends(requires_connection_reader)])
    def applications(application_id: str | None = None, conn_id: str | None = None,
                     max_lag: int | None = None) -> JSONResponse:
        bound = setting("ui_max_standby_lag") if max_lag is None else max_lag
        if bound < 0:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, f"max_lag must be >= 0, got {max_lag}")
        rows = []
        for reading in board.readings(conn_id=conn_id or None, application_id=application_id or None):
            if reading.status is None:
                rows.append(unreadable_application_data(reading.conn_id, reading.application_id,
                                                        reading.error or "unknown error"))
            else:
                rows.append(application_data(reading.conn_id, reading.status, max_standby_lag=bound))
        # what needs on-call first: unhealthy, then healthy, then stopped applications
        rows.sort(key=lambda r: (r["health"]["stopped"], r["health"]["healthy"], r["conn_id"], r["application_id"]))
        return JSONResponse({"generated_at": wall_clock_ms(), "refresh_seconds": setting("ui_refresh_seconds"),
                             "max_standby_lag": bound, "application_id": application_id, "conn_id": conn_id,
                             "applications": rows}, headers={"Cache-Control": "no-store"})

    @app.get("/metrics", dependencies=[Depends(requires_scraper)], include_in_schema=False)
    def metrics(request: Request, application_id: str | None = None, conn_id: str | None = None) -> Response:
        from prometheus_client.exposition import choose_encoder
        from prometheus_client.registry import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_BoardCollector(board, conn_id or None, application_id or None))
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(registry), media_type=content_type)

    return app


def _login_url(next_url: str) -> str:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager().get_url_login(next_url=next_url)


class _BoardCollector:
    """Every application of the board as metric families, labelled with its connection; plus
    ``stateful_streams_connection_up`` per connection whose applications could be listed."""

    def __init__(self, board: StatusBoard, conn_id: str | None, application_id: str | None) -> None:
        self.board = board
        self.conn_id = conn_id
        self.application_id = application_id

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        from airflow_stateful_provider.streams.status.metric_families import StatusReading, metric_families

        readings = self.board.readings(conn_id=self.conn_id, application_id=self.application_id)
        connections = GaugeMetricFamily("stateful_streams_connection_up", "1 when the applications on the "
                                        "connection's cluster could be listed", labels=["conn_id"])
        if not self.application_id:  # a scrape of one application reads it without listing
            unlisted = {r.conn_id for r in readings if not r.application_id}
            for conn_id in self.board.connections():
                if self.conn_id in (None, conn_id):
                    connections.add_metric([conn_id], 0 if conn_id in unlisted else 1)
        families = metric_families([StatusReading(r.application_id, r.status, r.error, {"conn_id": r.conn_id})
                                    for r in readings if r.application_id], now_ms=wall_clock_ms())
        return iter([connections, *families])
