"""The installed distribution: provider entry point, console script, Spark packaging."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points, metadata, requires, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

import airflow_stateful_provider
from airflow_stateful_provider.get_provider_info import get_provider_info
from airflow_stateful_provider.version_compat import MIN_AIRFLOW_VERSION


def test_provider_entry_point_is_registered():
    found = [ep for ep in entry_points(group="apache_airflow_provider")
             if ep.value.startswith("airflow_stateful_provider")]
    assert len(found) == 1
    assert found[0].load() is get_provider_info


def test_provider_info_names_the_distribution_and_version():
    info = get_provider_info()
    assert info["package-name"] == "airflow-stateful-provider"
    assert info["versions"] == [airflow_stateful_provider.__version__] == [version("airflow-stateful-provider")]


def test_console_script_prints_version_and_help():
    script = Path(sys.executable).parent / "stateful-streams"
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"stateful-streams {airflow_stateful_provider.__version__}"
    help_text = subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout
    assert "usage: stateful-streams" in help_text


def test_pyspark_and_pyspark_client_share_a_minor_version():
    # Both install into pyspark/; mismatched minors break spark-submit (see docs/architecture.md).
    full, client = version("pyspark"), version("pyspark-client")
    assert full.split(".")[:2] == client.split(".")[:2], (full, client)
    assert int(full.split(".")[0]) == 4


def test_the_distribution_declares_itself_an_airflow_provider_under_its_license():
    meta = metadata("airflow-stateful-provider")
    assert "Framework :: Apache Airflow :: Provider" in meta.get_all("Classifier")
    assert meta["License-Expression"] == "Apache-2.0"
    assert {url.split(",")[0] for url in meta.get_all("Project-URL")} >= {"Documentation", "Source", "Changelog"}
    assert {"s3", "gcs", "openlineage"} <= set(meta.get_all("Provides-Extra"))
    license_text = (Path(__file__).resolve().parents[2] / "LICENSE").read_text()
    assert license_text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in license_text
    assert (Path(airflow_stateful_provider.__file__).parent / "py.typed").is_file()


def test_the_runtime_airflow_check_and_the_declared_requirement_agree():
    airflow = next(Requirement(r) for r in requires("airflow-stateful-provider")
                   if Requirement(r).name == "apache-airflow")
    lower = min((s.version for s in airflow.specifier if s.operator == ">="), key=Version)
    assert Version(MIN_AIRFLOW_VERSION) == Version(lower)
