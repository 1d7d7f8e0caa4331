"""Airflow itself discovers the installed provider."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.airflow


def test_providers_manager_lists_this_provider(airflow_db):
    from airflow.providers_manager import ProvidersManager

    providers = ProvidersManager().providers
    assert "airflow-stateful-provider" in providers
    assert providers["airflow-stateful-provider"].version == "0.1.0"
