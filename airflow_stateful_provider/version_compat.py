"""The oldest Airflow the provider's Airflow modules (hooks, sensors, triggers, operators) run on.

The distribution requires ``apache-airflow>=3.3`` (pyproject.toml; a unit test keeps the two
equal): the Task SDK (``airflow.sdk``: BaseHook, BaseSensorOperator, async connection
lookups) and the declarative connection form. An environment that installed the package
without its dependencies on an older Airflow would fail later with an obscure ImportError or
AttributeError, so each of the Airflow packages calls :func:`require_airflow` when imported.
The engine (``streams``) imports nothing from Airflow and needs no check.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

__all__ = ["MIN_AIRFLOW_VERSION", "require_airflow"]

MIN_AIRFLOW_VERSION = "3.3.0"


def require_airflow(installed: str | None = None) -> None:
    """Raise RuntimeError naming both versions if ``installed`` (default: the installed
    Airflow) is older than MIN_AIRFLOW_VERSION. Pre-releases count as their base version,
    so 3.3.0rc1 passes."""
    if installed is None:
        from airflow import __version__

        installed = __version__
    try:
        base = Version(Version(installed).base_version)
    except InvalidVersion:
        raise RuntimeError(f"airflow-stateful-provider cannot read the installed Airflow version {installed!r}; "
                           f"it needs Apache Airflow {MIN_AIRFLOW_VERSION}+") from None
    if base < Version(MIN_AIRFLOW_VERSION):
        raise RuntimeError(f"airflow-stateful-provider needs Apache Airflow {MIN_AIRFLOW_VERSION}+ (the Task SDK, "
                           f"airflow.sdk); Apache Airflow {installed} is installed")
