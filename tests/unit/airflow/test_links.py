"""Extra links of SubmitTopologyOperator, RestorationSensor and StandbyLagSensor: the page URL
they build, the Spark UI address the tasks record from the status documents (poke and
deferrable mode), and what the links read back. The REST API side is tested on a real
deployment (tests/integration/test_airflow_services.py)."""

from __future__ import annotations

from unittest import mock

import pytest

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.links import stateful_streams as links
from airflow_stateful_provider.operators.submit import SubmitTopologyOperator, _spark_application
from airflow_stateful_provider.sensors.restoration import RestorationSensor
from airflow_stateful_provider.sensors.standby_lag import StandbyLagSensor
from tests.unit.streams.status.status_documents import NOW_MS, document, snapshot, task

UI = "http://driver-host:4040"


def with_spark(doc: dict, ui_url: str | None = UI) -> dict:
    return doc | {"host_application": {"kind": "spark", "application_id": "app-20261126-0001", "ui_url": ui_url}}


class TaskInstance:
    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def test_the_page_url_filters_to_the_application_and_carries_the_lag_bound():
    assert links.page_url("clicks", "kafka_prod", max_lag=500, base_url="https://airflow.example.com/") == \
        "https://airflow.example.com/stateful-streams/?application_id=clicks&conn_id=kafka_prod&max_lag=500"
    assert links.page_url(None, None, base_url="http://h:8080") == "http://h:8080/stateful-streams/"


def test_the_spark_ui_comes_from_a_live_instance():
    stale = with_spark(document("i-1", task("0_0"), published_at=NOW_MS - 600_000), "http://old:4040")
    assert links.spark_ui_url(snapshot(stale, with_spark(document("i-2", task("0_1"))))) == UI
    assert links.spark_ui_url(snapshot(with_spark(document("i-1", task("0_0")), None))) is None


def test_the_links_read_the_operator_and_what_the_task_recorded(monkeypatch):
    recorded = {"application_id": "clicks", "spark_ui_url": UI}
    monkeypatch.setattr(links, "_xcom", lambda ti_key, key: recorded.get(key))
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow:8080")
    sensor = StandbyLagSensor(task_id="lag", application_id="clicks", max_lag_records=250,
                              stateful_streams_conn_id="kafka_prod")
    submit = SubmitTopologyOperator(task_id="submit", topology="m:f", streams_config={"application_id": "clicks"})
    page, spark = links.StatefulStreamsPageLink(), links.SparkUILink()
    assert [link.name for link in sensor.operator_extra_links] == ["Stateful streams", "Spark UI"]
    assert page.get_link(sensor, ti_key=None) == \
        "http://airflow:8080/stateful-streams/?application_id=clicks&conn_id=kafka_prod&max_lag=250"
    assert page.get_link(submit, ti_key=None) == \
        "http://airflow:8080/stateful-streams/?application_id=clicks&conn_id=stateful_streams_default"
    assert spark.get_link(submit, ti_key=None) == UI
    recorded.pop("spark_ui_url")
    assert spark.get_link(sensor, ti_key=None) == ""  # no address recorded: Airflow shows the link disabled


def test_a_poke_records_the_spark_ui_once():
    ti = TaskInstance()
    sensor = RestorationSensor(task_id="restored", application_id="clicks")
    with mock.patch.object(StatefulStreamsHook, "get_status",
                           lambda self, *a, **k: snapshot(with_spark(document("i-1", task("0_0"))))):
        assert sensor.poke({"ti": ti}) is True
        ti.pushed.clear()
        sensor.poke({"ti": ti})
    assert ti.pushed == {}  # the same address is not pushed again


def test_a_resumed_deferrable_sensor_records_the_spark_ui_from_the_trigger_event():
    ti = TaskInstance()
    status_json = snapshot(with_spark(document("i-1", task("0_0")))).to_json_dict()
    RestorationSensor(task_id="restored", application_id="clicks").execute_complete(
        {"ti": ti}, {"status": "success", "message": "done", "table": "", "status_json": status_json})
    assert ti.pushed == {"spark_ui_url": UI}


def test_the_submit_operator_reports_the_spark_application():
    status = snapshot(with_spark(document("i-1", task("0_0"))), document("i-2", task("0_1")))
    assert _spark_application(status) == {"spark_application_id": "app-20261126-0001", "spark_ui_url": UI}
    assert _spark_application(snapshot(document("i-1", task("0_0")))) == \
        {"spark_application_id": None, "spark_ui_url": None}


@pytest.mark.parametrize("sensor", [RestorationSensor(task_id="r", application_id="a"),
                                    StandbyLagSensor(task_id="s", application_id="a", max_lag_records=1)])
def test_both_sensors_carry_both_links(sensor):
    assert [type(link) for link in sensor.operator_extra_links] == [links.StatefulStreamsPageLink, links.SparkUILink]
