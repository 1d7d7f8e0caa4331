"""Which applications the page and the scrape endpoint show, and their status, read through
the hook with a short cache.

The connections are those named in ``[stateful_streams] ui_conn_ids``, or else every
connection of type ``stateful_streams`` in Airflow's metadata database and in
``AIRFLOW_CONN_*`` environment variables. On each, the applications are the ids with a status
and a control topic (``StatefulStreamsHook.list_applications``). Every read goes through the
hook (no service of its own to run) and is kept ``status_cache_seconds``: the page refreshing
in several browsers and Prometheus scraping share the reads, and one slow application does
not hold up the others' cached answers. The applications of a connection are read in
parallel (READ_THREADS at a time). An application whose instances all left cleanly is read
as a snapshot without instances (stopped), not as an error.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams.errors import StreamsError
from airflow_stateful_provider.streams.status.application import ApplicationStatus

__all__ = ["CONFIG_SECTION", "ApplicationReading", "SettingError", "StatusBoard", "configured_conn_ids", "setting"]

log = logging.getLogger(__name__)

CONFIG_SECTION = "stateful_streams"
CONN_TYPE = "stateful_streams"
#: Settings of the ``[stateful_streams]`` section and their defaults (get_provider_info lists them).
DEFAULTS: dict[str, Any] = {
    "ui_conn_ids": "",
    "ui_refresh_seconds": 3,
    "ui_max_standby_lag": 10_000,
    "status_cache_seconds": 2.0,
    "stale_after_seconds": 30,
    "metrics_token": "",
}
#: Smallest value of the numeric settings (a page refreshing every 0 s would hammer the server).
MINIMUMS: dict[str, float] = {"ui_refresh_seconds": 1, "ui_max_standby_lag": 0, "status_cache_seconds": 0,
                              "stale_after_seconds": 1}
#: Bound of one status read or topic listing.
READ_TIMEOUT = timedelta(seconds=10)
#: Status reads of one connection's applications that run at once.
READ_THREADS = 8


class SettingError(ValueError):
    """A ``[stateful_streams]`` setting that cannot be used; the message names it and its value."""


def setting(name: str) -> Any:
    """A ``[stateful_streams]`` setting, of its default's type (SettingError naming a bad one)."""
    from airflow.configuration import conf

    default = DEFAULTS[name]
    raw = conf.get(CONFIG_SECTION, name, fallback=None)
    if raw is None or raw == "":
        return default
    kind = "an integer" if isinstance(default, int) else "a number" if isinstance(default, float) else "a string"
    try:
        value = type(default)(raw)
    except ValueError:
        raise SettingError(f"[{CONFIG_SECTION}] {name} must be {kind}, got {raw!r}") from None
    if name in MINIMUMS and value < MINIMUMS[name]:
        raise SettingError(f"[{CONFIG_SECTION}] {name} must be {kind} >= {MINIMUMS[name]:g}, got {raw!r}")
    return value


def configured_conn_ids(environ: dict[str, str] | None = None) -> list[str]:
    """``ui_conn_ids``, or every ``stateful_streams`` connection of the metadata database and
    the environment, sorted."""
    named = [c.strip() for c in str(setting("ui_conn_ids")).split(",") if c.strip()]
    if named:
        return named
    return sorted(set(_database_conn_ids()) | set(_environment_conn_ids(os.environ if environ is None else environ)))


def _database_conn_ids() -> list[str]:
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    from sqlalchemy import select

    try:
        with create_session() as session:
            return list(session.scalars(select(Connection.conn_id).where(Connection.conn_type == CONN_TYPE)))
    except Exception:
        log.warning("cannot list the stateful_streams connections of the metadata database", exc_info=True)
        return []


def _environment_conn_ids(environ: Mapping[str, str]) -> list[str]:
    """``AIRFLOW_CONN_<ID>`` variables whose connection (JSON or URI) is of type stateful_streams."""
    found = []
    for key, value in environ.items():
        if not key.startswith("AIRFLOW_CONN_"):
            continue
        text = value.strip()
        if text.startswith("{"):
            try:
                conn_type = json.loads(text).get("conn_type")
            except (ValueError, AttributeError):
                continue
        else:
            conn_type = text.split("://", 1)[0].replace("-", "_") if "://" in text else None
        if conn_type == CONN_TYPE:
            found.append(key[len("AIRFLOW_CONN_"):].lower())
    return found


@dataclasses.dataclass(frozen=True)
class ApplicationReading:
    """One application's status, or why it could not be read; ``application_id`` is "" when
    the connection itself could not be listed."""

    conn_id: str
    application_id: str
    status: ApplicationStatus | None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class _Failure:
    error: Exception


class _Cached:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at = float("-inf")
        self.value: Any = None


class StatusBoard:
    """Cached reads of the applications of the configured connections (module docstring)."""

    def __init__(self, *, conn_ids: Callable[[], list[str]] = configured_conn_ids,
                 hook_factory: Callable[[str], Any] | None = None, cache_seconds: float | None = None,
                 stale_after_seconds: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._conn_ids = conn_ids
        self._hook_factory = hook_factory or _hook
        self._cache_seconds = cache_seconds
        self._stale_after_seconds = stale_after_seconds
        self._clock = clock
        self._cache: dict[tuple[str, ...], _Cached] = {}
        self._cache_lock = threading.Lock()

    def connections(self) -> list[str]:
        return list(self._conn_ids())

    def readings(self, *, conn_id: str | None = None, application_id: str | None = None) -> list[ApplicationReading]:
        """Every application of every configured connection, or those matching the filters
        (an application asked for by name is read even when its topics are not listed)."""
        out: list[ApplicationReading] = []
        for conn in self.connections():
            if conn_id and conn != conn_id:
                continue
            if application_id:
                out.append(self._reading(conn, application_id))
                continue
            try:
                applications = self._cached(("list", conn), self._application_lister(conn))
            except Exception as exc:  # noqa: BLE001 - one connection failing is a row of the page, not an error page
                out.append(ApplicationReading(conn, "", None, _error_text(exc)))
                continue
            with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS,
                                                       thread_name_prefix="stateful-streams-status") as pool:
                out += list(pool.map(lambda app, c=conn: self._reading(c, app), applications))
        return out

    def _reading(self, conn_id: str, application_id: str) -> ApplicationReading:
        stale_after = self._stale_after_seconds if self._stale_after_seconds is not None \
            else float(setting("stale_after_seconds"))
        try:
            status = self._cached(("status", conn_id, application_id), lambda: self._hook_factory(conn_id).get_status(
                application_id, stale_after=timedelta(seconds=stale_after), timeout=READ_TIMEOUT, allow_empty=True))
        except Exception as exc:  # noqa: BLE001 - shown on the page and as status_up 0, never a 500
            return ApplicationReading(conn_id, application_id, None, _error_text(exc))
        return ApplicationReading(conn_id, application_id, status)

    def _application_lister(self, conn_id: str) -> Callable[[], Any]:
        """Lists the applications of ``conn_id`` when called (a cache miss)."""
        return lambda: self._hook_factory(conn_id).list_applications(timeout=READ_TIMEOUT)

    def _cached(self, key: tuple[str, ...], read: Callable[[], Any]) -> Any:
        """``read()``'s value (or exception), at most ``status_cache_seconds`` old; one read at a
        time per key (concurrent callers wait for it): brokers that do not answer cost one
        read timeout per period, not one per viewer."""
        ttl = self._cache_seconds if self._cache_seconds is not None else float(setting("status_cache_seconds"))
        with self._cache_lock:
            entry = self._cache.setdefault(key, _Cached())
        with entry.lock:
            if self._clock() - entry.at > ttl:
                try:
                    entry.value = read()
                except Exception as exc:  # noqa: BLE001 - kept and raised to every caller of the period
                    entry.value = _Failure(exc)
                entry.at = self._clock()
            if isinstance(entry.value, _Failure):
                raise entry.value.error
            return entry.value


def _hook(conn_id: str) -> Any:
    from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook

    return StatefulStreamsHook(conn_id)


def _error_text(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, StreamsError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())
