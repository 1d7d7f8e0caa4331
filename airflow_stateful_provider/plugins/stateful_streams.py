"""The provider's Airflow plugin, registered through the ``airflow.plugins`` entry point of the
distribution (pyproject.toml), so installing the provider is enough: the API server mounts
the page and the scrape endpoint (plugins/web.py) at ``/stateful-streams``, and the UI's
Browse menu gets a "Stateful streams" entry that shows the page inside Airflow."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_stateful_provider.links.stateful_streams import PAGE_PREFIX
from airflow_stateful_provider.plugins.web import create_app

__all__ = ["StatefulStreamsPlugin"]


class StatefulStreamsPlugin(AirflowPlugin):
    name = "stateful_streams"
    fastapi_apps = [{"app": create_app(), "url_prefix": PAGE_PREFIX, "name": "Stateful streams"}]
    external_views = [{"name": "Stateful streams", "href": f"{PAGE_PREFIX}/", "url_route": "stateful-streams",
                       "destination": "nav", "category": "browse"}]
