"""Extra links on the task instances of SubmitTopologyOperator, RestorationSensor and
StandbyLagSensor: the provider's "Stateful streams" page filtered to the application, and
the Spark UI of the application's Spark driver.

Airflow 3 computes a task's links when the task finishes, in the task's process, and keeps
them in XCom; the UI and the REST API read them from there. The page link is built from the
task's application id and connection (a StandbyLagSensor adds its lag bound, which the page
shows standby lag against); the Spark UI link is the address the task recorded in XCom
(``spark_ui_url``) from the instances' status documents, empty when the Spark UI is off.
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink, conf

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

    from airflow_stateful_provider.streams.status.application import ApplicationStatus

__all__ = ["PAGE_PREFIX", "SPARK_UI_XCOM", "SparkUILink", "StatefulStreamsPageLink", "page_url", "spark_ui_url"]

#: Where the plugin serves the page and its data, under the API server's base URL.
PAGE_PREFIX = "/stateful-streams"
#: XCom keys the tasks push: the application id and the Spark driver's web UI address.
APPLICATION_ID_XCOM = "application_id"
SPARK_UI_XCOM = "spark_ui_url"


def page_url(application_id: str | None, conn_id: str | None, *, max_lag: int | None = None,
             base_url: str | None = None) -> str:
    """The page, filtered to ``application_id`` of connection ``conn_id``."""
    base = (base_url if base_url is not None else conf.get("api", "base_url", fallback="")).rstrip("/")
    query = {key: value for key, value in (("application_id", application_id), ("conn_id", conn_id),
                                            ("max_lag", max_lag)) if value not in (None, "")}
    return f"{base}{PAGE_PREFIX}/" + (f"?{urllib.parse.urlencode(query)}" if query else "")


def spark_ui_url(status: ApplicationStatus) -> str | None:
    """The Spark UI a live instance of ``status`` reports, if any."""
    for instance in status.instances:
        host = instance.host_application
        if not instance.stale and host is not None and host.ui_url:
            return host.ui_url
    return None


def _xcom(ti_key: TaskInstanceKey, key: str) -> Any:
    from airflow.sdk.execution_time.xcom import XCom

    return XCom.get_value(ti_key=ti_key, key=key)


class StatefulStreamsPageLink(BaseOperatorLink):
    """The "Stateful streams" page of the task's application."""

    name = "Stateful streams"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        application_id = getattr(operator, "application_id", None) or _xcom(ti_key, APPLICATION_ID_XCOM)
        return page_url(application_id, getattr(operator, "stateful_streams_conn_id", None),
                        max_lag=getattr(operator, "max_lag_records", None))


class SparkUILink(BaseOperatorLink):
    """The Spark UI of the application's driver, as its instances report it."""

    name = "Spark UI"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _xcom(ti_key, SPARK_UI_XCOM) or ""
