"""Extra links of the provider's operators and sensors (Airflow 3 Task SDK; checked at import)."""

from __future__ import annotations

from airflow_stateful_provider.version_compat import require_airflow

require_airflow()
