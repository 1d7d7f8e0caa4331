"""The plugin's pure parts: what the "Stateful streams" page shows of a snapshot
(plugins/page_data.py), which applications it reads and how reads are shared
(plugins/status_board.py), and its endpoints' answers with Airflow's auth replaced by fakes
(plugins/web.py). The page in Airflow's API server and a browser: the integration test
tests/integration/test_airflow_services.py."""

from __future__ import annotations

import json

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from airflow_stateful_provider.plugins import web
from airflow_stateful_provider.plugins.page_data import MAX_COMMANDS, application_data, unreadable_application_data
from airflow_stateful_provider.plugins.status_board import SettingError, StatusBoard, configured_conn_ids, setting
from airflow_stateful_provider.streams.errors import BrokerUnreachableError
from tests.unit.streams.status.status_documents import NOW_MS, changelog, document, snapshot, task

# ---------------------------------------------------------------------------- page data


def restoring_status(*, acknowledgements: int = 0):
    """i-1 restores 0_0 (400 of 1,000 at 200/s) and runs 0_1; i-2 keeps standbys of both,
    0_1's 5,000 offsets behind."""
    i1 = document("i-1", task("0_0", "active", "restoring", changelog(0, 0, 400, 1_000, rate=200.0)), task("0_1"))
    i1["acknowledgements"] = [{"command_id": f"cmd-{n}", "status": "done", "result": {"n": n}, "at": NOW_MS - n * 1_000}
                              for n in range(acknowledgements)]
    i1["host_application"] = {"kind": "spark", "application_id": "app-7", "ui_url": "http://driver:4040"}
    i2 = document("i-2", task("0_0", "standby", "running", changelog(0, 0, 900, 1_000)),
                  task("0_1", "standby", "running", changelog(1, 0, 1_000, 6_000)))
    return snapshot(i1, i2, ends={("clicks-counts-changelog", 0): 1_000, ("clicks-counts-changelog", 1): 6_000})


def test_a_restoring_task_has_its_progress_rate_eta_and_source():
    data = application_data("kafka_prod", restoring_status(), max_standby_lag=10_000)
    restoring = next(t for t in data["tasks"] if t["task_id"] == "0_0")
    assert restoring["state"] == "restoring" and restoring["active"]["instance_id"] == "i-1"
    r = restoring["restoration"]
    assert (r["restored"], r["total"], r["remaining"], r["pending"]) == (400, 1_000, 600, False)
    assert r["fraction"] == pytest.approx(0.4) and r["text"] == "400/1,000 (40%)"
    assert (r["rate"], r["eta"]) == ("200/s", "3s")
    assert data["spark"] == {"application_id": "app-7", "ui_url": "http://driver:4040"}
    assert data["health"] == {"healthy": True, "stopped": False, "problems": [],
                              "summary": "OK: application clicks: 2 instance(s), 2 task(s): 1 running, 1 restoring"}


def test_standby_lag_is_marked_against_the_bound_and_the_verdict_follows():
    within = application_data("kafka_prod", restoring_status(), max_standby_lag=5_000)
    over = application_data("kafka_prod", restoring_status(), max_standby_lag=4_999)
    lags = {t["task_id"]: t["standbys"][0] for t in within["tasks"]}
    assert (lags["0_0"]["lag"], lags["0_0"]["role"], lags["0_1"]["lag_text"]) == (100, "standby", "5,000")
    assert lags["0_1"]["within_bound"] is True and within["health"]["healthy"] is True
    assert next(t for t in over["tasks"] if t["task_id"] == "0_1")["standbys"][0]["within_bound"] is False
    assert over["health"]["healthy"] is False
    assert over["health"]["problems"] == ["standby of task 0_1 on i-2 lags 5,000 offsets (bound 4,999)"]


def test_control_commands_newest_first_and_capped():
    data = application_data("kafka_prod", restoring_status(acknowledgements=MAX_COMMANDS + 5), max_standby_lag=0)
    commands = data["commands"]
    assert len(commands) == MAX_COMMANDS
    assert [c["command_id"] for c in commands[:3]] == ["cmd-0", "cmd-1", "cmd-2"]
    assert commands[1]["age"] == "1s ago" and commands[1]["result"] == {"n": 1}  # acknowledged 1 s before now


def test_an_application_whose_instances_all_left_is_stopped_not_failing():
    data = application_data("kafka_prod", snapshot(), max_standby_lag=0)
    assert data["health"]["stopped"] is True and data["health"]["problems"] == []
    assert data["tasks"] == [] and data["instances"] == []


def test_a_stale_instance_makes_the_application_unhealthy_and_is_flagged():
    stale = document("i-1", task("0_0"), published_at=NOW_MS - 60_000)
    data = application_data("kafka_prod", snapshot(stale), max_standby_lag=0)
    assert data["instances"][0]["stale"] is True and data["instances"][0]["age"] == "1m00s ago"
    assert data["health"]["healthy"] is False and "stale" in data["health"]["problems"][0]
    assert data["tasks"][0]["state"] == "stale"


def test_an_unreadable_application_is_a_row_with_its_error():
    data = unreadable_application_data("kafka_prod", "clicks", "BrokerUnreachableError: no broker at b:9092")
    assert data["health"] == {"healthy": False, "stopped": False, "problems": ["BrokerUnreachableError: no broker "
                                                                               "at b:9092"],
                              "summary": "UNREADABLE: BrokerUnreachableError: no broker at b:9092"}
    assert data["tasks"] == [] and data["error"].startswith("BrokerUnreachableError")


# ---------------------------------------------------------------------------- status board


class FakeHook:
    """A hook whose reads are counted; ``fail`` makes them raise."""

    reads: list[tuple[str, str]] = []

    def __init__(self, conn_id: str, apps: dict[str, list[str]], fail: Exception | None = None) -> None:
        self.conn_id, self.apps, self.fail = conn_id, apps, fail

    def list_applications(self, *, timeout):
        FakeHook.reads.append(("list", self.conn_id))
        if self.fail:
            raise self.fail
        return self.apps[self.conn_id]

    def get_status(self, application_id, *, stale_after, timeout, allow_empty):
        FakeHook.reads.append(("status", application_id))
        assert allow_empty is True  # a stopped application is a row, not an error
        if self.fail:
            raise self.fail
        return restoring_status()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def board_of():
    FakeHook.reads = []

    def make(apps: dict[str, list[str]], *, fail: dict[str, Exception] | None = None, clock=None) -> StatusBoard:
        return StatusBoard(conn_ids=lambda: sorted(apps), cache_seconds=2.0, stale_after_seconds=30,
                           hook_factory=lambda c: FakeHook(c, apps, (fail or {}).get(c)), clock=clock or Clock())
    return make


def test_reads_are_shared_for_the_cache_period_then_repeated(board_of):
    clock = Clock()
    board = board_of({"kafka_prod": ["clicks", "orders"]}, clock=clock)
    first = board.readings()
    board.readings()
    assert [r.application_id for r in first] == ["clicks", "orders"] and all(r.status for r in first)
    assert sorted(FakeHook.reads) == [("list", "kafka_prod"), ("status", "clicks"), ("status", "orders")]
    clock.now += 2.5
    board.readings()
    assert len(FakeHook.reads) == 6


def test_a_failing_connection_is_a_row_and_its_failure_is_cached_too(board_of):
    clock = Clock()
    board = board_of({"kafka_prod": ["clicks"], "kafka_lab": []},
                     fail={"kafka_lab": BrokerUnreachableError("no broker answered at lab:9092")}, clock=clock)
    readings = board.readings()
    assert [(r.conn_id, r.application_id, r.error) for r in readings] == [
        ("kafka_lab", "", "no broker answered at lab:9092"), ("kafka_prod", "clicks", None)]
    board.readings()
    assert FakeHook.reads.count(("list", "kafka_lab")) == 1  # one timeout per period, not per viewer


def test_filters_read_one_application_without_listing(board_of):
    board = board_of({"kafka_prod": ["clicks"], "kafka_lab": ["clicks"]})
    readings = board.readings(conn_id="kafka_prod", application_id="not-listed")
    assert [(r.conn_id, r.application_id) for r in readings] == [("kafka_prod", "not-listed")]
    assert FakeHook.reads == [("status", "not-listed")]


def test_a_library_error_is_named_by_its_type(board_of):
    board = board_of({"kafka_prod": ["clicks"]}, fail={"kafka_prod": OSError("Connection refused")})
    [reading] = board.readings(application_id="clicks")
    assert reading.status is None and reading.error == "OSError: Connection refused"


def test_connections_come_from_the_setting_or_the_environment(monkeypatch):
    monkeypatch.setattr("airflow_stateful_provider.plugins.status_board._database_conn_ids", lambda: ["db_conn"])
    environ = {"AIRFLOW_CONN_KAFKA_PROD": json.dumps({"conn_type": "stateful_streams", "host": "b:9092"}),
               "AIRFLOW_CONN_KAFKA_URI": "stateful-streams://b:9092",
               "AIRFLOW_CONN_POSTGRES": "postgres://db", "AIRFLOW_CONN_BROKEN": "{not json"}
    assert configured_conn_ids(environ) == ["db_conn", "kafka_prod", "kafka_uri"]
    monkeypatch.setenv("AIRFLOW__STATEFUL_STREAMS__UI_CONN_IDS", " kafka_a, kafka_b ,")
    assert configured_conn_ids(environ) == ["kafka_a", "kafka_b"]


def test_a_bad_setting_is_named(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATEFUL_STREAMS__UI_REFRESH_SECONDS", "5")
    assert setting("ui_refresh_seconds") == 5
    monkeypatch.setenv("AIRFLOW__STATEFUL_STREAMS__UI_REFRESH_SECONDS", "soon")
    with pytest.raises(SettingError, match=r"\[stateful_streams\] ui_refresh_seconds must be an integer, got 'soon'"):
        setting("ui_refresh_seconds")
    monkeypatch.setenv("AIRFLOW__STATEFUL_STREAMS__UI_REFRESH_SECONDS", "0")  # the page would refresh nonstop
    with pytest.raises(SettingError, match=r"ui_refresh_seconds must be an integer >= 1, got '0'"):
        setting("ui_refresh_seconds")
    monkeypatch.setenv("AIRFLOW__STATEFUL_STREAMS__STATUS_CACHE_SECONDS", "0.5")
    assert setting("status_cache_seconds") == 0.5


# ---------------------------------------------------------------------------- endpoints


@pytest.fixture
def client(board_of, monkeypatch):
    """The plugin's app over kafka_prod's two applications (orders unreadable) and kafka_lab,
    which cannot be listed; the token "reader" may read connections, "viewer" may not, no
    token is 401 (Airflow's answers)."""
    async def user(request):
        token = request.headers.get("authorization", "").removeprefix("Bearer ") or request.cookies.get("_token")
        if not token:
            raise HTTPException(401, "Not authenticated")
        return token

    monkeypatch.setattr(web, "_user", user)
    monkeypatch.setattr(web, "_may_read_connections", lambda u: u == "reader")
    monkeypatch.setattr(web, "_login_url", lambda next_url: f"/auth/login?next={next_url}")
    monkeypatch.setenv("AIRFLOW__STATEFUL_STREAMS__METRICS_TOKEN", "prom-secret")
    apps = {"kafka_lab": [], "kafka_prod": ["clicks", "orders"]}
    board = board_of(apps, fail={"kafka_lab": BrokerUnreachableError("no broker answered at lab:9092")})
    original = FakeHook.get_status

    def get_status(self, application_id, **kwargs):
        if application_id == "orders":
            raise BrokerUnreachableError("lost Kafka at b:9092")
        return original(self, application_id, **kwargs)

    monkeypatch.setattr(FakeHook, "get_status", get_status)
    return TestClient(web.create_app(board), base_url="http://airflow", follow_redirects=False)


def test_the_page_sends_a_browser_without_a_session_to_the_login(client):
    answer = client.get("/?application_id=clicks")
    assert answer.status_code == 307
    assert answer.headers["location"] == "/auth/login?next=http://airflow/?application_id=clicks"
    assert client.get("/", headers={"Authorization": "Bearer viewer"}).status_code == 403
    client.cookies.set("_token", "reader")  # what Airflow's login sets
    page = client.get("/")
    assert page.status_code == 200 and "<title>Stateful streams</title>" in page.text
    assert page.headers["cache-control"] == "no-store"


def test_the_data_lists_unhealthy_applications_first(client):
    reader = {"Authorization": "Bearer reader"}
    assert client.get("/api/applications", headers={"Authorization": "Bearer viewer"}).status_code == 403
    assert client.get("/api/applications").status_code == 401
    data = client.get("/api/applications", headers=reader).json()
    assert [(a["conn_id"], a["application_id"], a["health"]["healthy"]) for a in data["applications"]] == [
        ("kafka_lab", "", False), ("kafka_prod", "orders", False), ("kafka_prod", "clicks", True)]
    assert [a["error"] for a in data["applications"][:2]] == ["no broker answered at lab:9092", "lost Kafka at b:9092"]
    assert data["max_standby_lag"] == 10_000 and data["refresh_seconds"] == 3
    bounded = client.get("/api/applications?conn_id=kafka_prod&application_id=clicks&max_lag=4999",
                         headers=reader).json()
    assert [a["health"]["healthy"] for a in bounded["applications"]] == [False]
    bad = client.get("/api/applications?max_lag=-1", headers=reader)
    assert bad.status_code == 400 and "max_lag must be >= 0, got -1" in bad.text


def test_the_scrape_takes_the_static_token_and_speaks_openmetrics(client):
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 403
    answer = client.get("/metrics", headers={"Authorization": "Bearer prom-secret",
                                             "Accept": "application/openmetrics-text; version=1.0.0"})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/openmetrics-text")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(answer.text) for s in f.samples}
    assert samples[("stateful_streams_connection_up", (("conn_id", "kafka_prod"),))] == 1
    assert samples[("stateful_streams_connection_up", (("conn_id", "kafka_lab"),))] == 0
    up = {dict(labels)["application_id"]: v for (name, labels), v in samples.items()
          if name == "stateful_streams_status_up"}
    assert up == {"clicks": 1, "orders": 0}
    assert samples[("stateful_streams_tasks", (("application_id", "clicks"), ("conn_id", "kafka_prod"),
                                               ("state", "restoring")))] == 1
    plain = client.get("/metrics?conn_id=kafka_prod&application_id=clicks", headers={"Authorization": "Bearer reader"})
    assert plain.headers["content-type"].startswith("text/plain") and "stateful_streams_status_up" in plain.text
    assert "orders" not in plain.text


def test_a_bad_setting_is_a_500_that_names_it(client, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STATEFUL_STREAMS__UI_MAX_STANDBY_LAG", "-5")
    answer = client.get("/api/applications", headers={"Authorization": "Bearer reader"})
    assert answer.status_code == 500
    assert answer.json() == {"detail": "[stateful_streams] ui_max_standby_lag must be an integer >= 0, got '-5'"}
