"""The provider's Airflow plugin: the "Stateful streams" page and the metrics scrape endpoint
on the API server (Airflow 3; checked at import)."""

from __future__ import annotations

from airflow_stateful_provider.version_compat import require_airflow

require_airflow()
