"""On-call in Airflow, and the example DAGs on a real Airflow deployment that submits to a real
Spark cluster.

Airflow runs as its four services (API server, scheduler, DAG processor, triggerer:
tools/airflow_services.py) with the LocalExecutor on SQLite, the project's dags/ folder and
the Kafka connection in the environment, started once for the module. Everything goes
through the API server, as a browser, Prometheus or an external system would use it.

The "Stateful streams" page and the scrape endpoint (the provider's plugin), with an
application of two instances in this process whose tasks restore a prefilled changelog,
slowly (tests/integration/oncall_application.py):

- a real headless Chromium (tools/browser.py) is sent to Airflow's login without a session,
  then, logged in, sees the task rows, a restoration progress bar that advances and the
  standby-lag column (docs/pictures/stateful_streams_page.py runs it to take the screenshot
  docs/runbook.md shows);
- a viewer (no permission to read connections) is refused; Prometheus' static token works;
- the scrape endpoint has every metric the runbook lists with plausible values: restoration
  ones while restoring, and while data flows, process-total rising and records-lag-max
  falling to 0.

Then ``spark_default`` is pointed at a Spark standalone cluster on loopback
(``spark://127.0.0.1:<port>``, client deploy mode) and:

- the DAG processor parses dags/ without an import error;
- ``wait_for_state``, triggered before the application exists: both sensors go to
  ``deferred`` (they cannot be satisfied yet), and once the application runs the triggerer
  fires their triggers and a worker resumes them to success (their task logs, read through
  the API, say so in that order);
- a triggered ``stateful_pipeline`` run ends ``success``: the operator submitted the topology
  to the cluster and its deferrable sensors passed;
- the instances run on the cluster's executors, not on the Airflow worker;
- ``store_maintenance`` runs online against them and its tasks report what they did (XCom);
- the task instances of the submit operator and both sensors carry the extra links (read
  through the REST API) to the page and to the Spark UI, which answers;
- the application and the services stop cleanly.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from airflow_stateful_provider import cli
from airflow_stateful_provider.streams.status.reader import read_status_documents
from tests.integration.oncall_application import Pace, Scrape, json_records, prepare_application
from tools.airflow_services import FINISHED_RUN_STATES, VIEWER, AirflowServicesError, LocalAirflow
from tools.browser import HeadlessChromium
from tools.kafka.topics import produce
from tools.waits import wait_progressing, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]  # the example DAGs' test is marked spark too

REPO_ROOT = Path(__file__).resolve().parents[2]
PIPELINE_SENSORS = ("wait_for_restoration", "check_standby_lag")
WAIT_SENSORS = ("state_restored", "standbys_warm")
#: Where the page's screenshot goes when docs/pictures/stateful_streams_page.py runs the test
#: (docs/runbook.md shows it); otherwise into the test's temporary directory, so a test run
#: leaves the checkout as it was.
SCREENSHOT_ENV = "STATEFUL_STREAMS_PAGE_SCREENSHOT"
#: Prometheus' static token for the scrape endpoint ([stateful_streams] metrics_token).
SCRAPE_TOKEN = "scrape-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def airflow(bootstrap_servers, tmp_path_factory):
    """Airflow's services, once for the module; every component must stop cleanly."""
    airflow = LocalAirflow(tmp_path_factory.mktemp("airflow") / "home", dags_folder=REPO_ROOT / "dags", env={
        "AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT": json.dumps({"conn_type": "stateful_streams",
                                                             "host": bootstrap_servers}),
        "AIRFLOW__STATEFUL_STREAMS__METRICS_TOKEN": SCRAPE_TOKEN,
        # the page refreshes every second (?refresh=1); reads are shared for half of one
        "AIRFLOW__STATEFUL_STREAMS__STATUS_CACHE_SECONDS": "0.5",
        # the driver and the executors bind to loopback, like the cluster
        "SPARK_LOCAL_IP": "127.0.0.1",
    })
    airflow.start()
    print(f"\nAirflow services on {airflow.url} started in {airflow.start_seconds:.1f}s")
    try:
        yield airflow
    finally:
        codes = airflow.stop()
    assert codes == {component: 0 for component in codes}, (codes, airflow.logs())


@pytest.fixture(scope="module")
def oncall_app(bootstrap_servers, tmp_path_factory):
    """The application, prepared; the first test that needs it running starts it."""
    app = prepare_application(bootstrap_servers, tmp_path_factory.mktemp("oncall-app"))
    try:
        yield app
    finally:
        app.close()


def scrape(airflow: LocalAirflow, application_id: str | None = None) -> Scrape:
    """One scrape of the endpoint as Prometheus makes it (its static token, OpenMetrics), of one
    application (the session's broker holds every other test's applications too) or all."""
    query = "" if application_id is None else f"?application_id={application_id}"
    status, headers, body = airflow.get(f"/stateful-streams/metrics{query}", headers={
        "Authorization": f"Bearer {SCRAPE_TOKEN}", "Accept": "application/openmetrics-text; version=1.0.0"})
    assert status == 200 and headers["content-type"].startswith("application/openmetrics-text"), body[:2000]
    return Scrape.parse(body)


# ---------------------------------------------------------------------------- the page


def task_rows(browser: HeadlessChromium) -> dict[str, dict]:
    """The page's task rows: state, restoration fraction and standby lags."""
    return browser.evaluate("""Object.fromEntries([...document.querySelectorAll('table.tasks tr[data-task]')].map(
        row => [row.dataset.task, {
            state: row.dataset.state,
            fraction: (row.querySelector('.bar') || {dataset: {}}).dataset.fraction || null,
            restored: (row.querySelector('.restored') || {}).textContent || null,
            lags: [...row.querySelectorAll('td.standby-lag .lag')].map(s => s.dataset.lag),
        }]))""")


def test_stateful_streams_page_in_chromium_while_a_task_restores(airflow, oncall_app, tmp_path):
    app = oncall_app.application_id
    page = f"/stateful-streams/?application_id={app}&refresh=1"
    screenshot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "stateful-streams-page.png")
    # installed, not configured: the API server loaded the plugin from its entry point
    plugins = {p["name"]: p for p in airflow.api("GET", "/api/v2/plugins")["plugins"]}
    plugin = plugins["stateful_streams"]
    assert [v["name"] for v in plugin["external_views"]] == ["Stateful streams"], plugin
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/stateful-streams"], plugin
    status, headers, _ = airflow.get(page)
    assert status == 307 and headers["location"].startswith("/auth/login?next="), (status, headers)
    viewer = {"Authorization": f"Bearer {airflow.token(VIEWER)}"}
    assert airflow.get(f"/stateful-streams/api/applications?application_id={app}", headers=viewer)[0] == 403
    assert airflow.get("/stateful-streams/metrics", headers=viewer)[0] == 403
    assert airflow.get("/stateful-streams/metrics")[0] == 401

    labels = {"conn_id": "stateful_streams_default", "application_id": app}
    # what changed, in order: the fractions each task's bar showed, and (negated) each scraped
    # series of remaining records; a restoration that stops changing fails the wait
    bars: dict[str, list[float]] = defaultdict(list)
    remaining: dict[frozenset, list[float]] = defaultdict(list)
    scrapes: list[Scrape] = []

    def advanced(series: dict) -> bool:
        """One of the series went the right way between two consecutive readings (a task
        moved to another instance starts again from 0: a new bar, a new series)."""
        return any(a < b for values in series.values() for a, b in itertools.pairwise(values))

    with HeadlessChromium(tmp_path / "chromium") as browser:
        browser.navigate(airflow.url + page)
        assert "/auth/login" in browser.evaluate("location.pathname"), "no session: Airflow's login page first"
        browser.set_cookie("_token", airflow.token(), airflow.url)  # what Airflow's login form sets
        browser.navigate(airflow.url + page)
        browser.wait_for("document.getElementById('status-line').dataset.generatedAt", "the page's first data",
                         timeout=120)
        oncall_app.start()  # the page is watching: its tasks restore from now on

        def seen_advancing() -> bool:
            for task_id, row in task_rows(browser).items():
                if row["state"] == "restoring" and row["fraction"] and float(row["fraction"]) < 1:
                    if not bars[task_id] or bars[task_id][-1] != float(row["fraction"]):
                        bars[task_id].append(float(row["fraction"]))
            scrapes.append(scrape(airflow, app))
            for (name, series_labels), value in scrapes[-1].samples.items():
                if name == "kafka_streams_stream_task_metrics_restore_remaining_records_total" and \
                        set(labels.items()) <= series_labels and remaining[series_labels][-1:] != [-value]:
                    remaining[series_labels].append(-value)  # falling remaining: rising -value
            if advanced(bars) and advanced(remaining):
                browser.screenshot(screenshot)
                return True
            return False

        wait_progressing(seen_advancing, lambda: sum(map(len, bars.values())) + sum(map(len, remaining.values())),
                         "a restoration progress bar that advances on the page, and its remaining records falling "
                         "on the scrape endpoint", measure="readings of restoring tasks", stall=60,
                         context=lambda: f"bars {dict(bars)}, remaining {dict(remaining)}, rows {task_rows(browser)}")
        # both tasks listed: the second instance's first status document may come after the
        # first instance's restoration advanced (seen under load: one row at this point)
        wait_until(lambda: sorted(task_rows(browser)) == ["0_0", "0_1"], 120, "both tasks on the page",
                   lambda: str(task_rows(browser)))

        def standby_lag_shown() -> bool:  # the standby-lag column: a standby's first report may come later
            return any(lag.isdigit() for r in task_rows(browser).values() for lag in r["lags"])

        wait_until(standby_lag_shown, 120, "a standby's lag on the page", lambda: str(task_rows(browser)))
        scrapes.append(scrape(airflow, app))  # the standbys, assigned by now, have their update rate
        header = browser.evaluate("[...document.querySelectorAll('table.tasks th')].map(h => h.textContent)")
        assert "Standby lag (bound 10,000)" in header and "Input lag" in header, header
        assert browser.evaluate("document.querySelectorAll('table.instances tr[data-instance]').length") == 2
    assert screenshot.stat().st_size > 10_000

    # restoration as the scrape endpoint saw it meanwhile (Kafka Streams' task-level names)
    assert max(v for s in scrapes for v in s.values("kafka_streams_stream_task_metrics_restore_rate", **labels)) > 0
    assert any(s.values("kafka_streams_stream_task_metrics_update_rate", **labels) for s in scrapes)
    assert max(s.value("stateful_streams_tasks", state="restoring", **labels) for s in scrapes) >= 1


# ---------------------------------------------------------------------------- metrics


def test_metrics_endpoint_while_data_flows(airflow, oncall_app, bootstrap_servers):
    app = oncall_app.application_id
    labels = {"conn_id": "stateful_streams_default", "application_id": app}
    oncall_app.start()  # (started already when the page's test ran first)
    wait_until(oncall_app.running, 300, "both instances running (restoration done)")

    def processed(s: Scrape) -> float:
        return sum(s.values("kafka_streams_stream_thread_metrics_process_total", **labels))

    def lag_max(s: Scrape) -> float | None:
        lags = s.values("kafka_consumer_consumer_fetch_manager_metrics_records_lag_max", **labels)
        return max(lags) if lags else None

    scrapes = [scrape(airflow, app)]
    before = processed(scrapes[0])
    Pace.seconds_per_record = 0.002  # slower than the burst arrives: the input lag builds up, then drains
    try:
        good = produce(bootstrap_servers, oncall_app.input_topic, json_records(4_000))
        bad = produce(bootstrap_servers, oncall_app.input_topic, [("bad", "not json")] * 3)

        def drained() -> bool:
            scrapes.append(scrape(airflow, app))
            last = scrapes[-1]
            return (processed(last) >= before + good and lag_max(last) == 0 and
                    sum(last.values("kafka_streams_stream_task_metrics_skipped_records_total", **labels)) == bad)

        wait_progressing(drained, lambda: processed(scrapes[-1]), "every record processed and the input lag back "
                         "to 0 on the scrape endpoint", measure="process-total", interval=0.5)
    finally:
        Pace.seconds_per_record = 0.0
    last = scrapes[-1]
    totals = [processed(s) for s in scrapes]
    assert totals == sorted(totals) and totals[-1] >= before + good > totals[0], totals  # process-total rises
    lags = [lag_max(s) for s in scrapes if lag_max(s) is not None]
    assert max(lags) > 0 and lags[-1] == 0, lags  # records-lag-max falls to 0
    rates = [v for s in scrapes for v in s.values("kafka_streams_stream_thread_metrics_process_rate", **labels)]
    assert max(rates) > 0, rates
    for name in ("commit_latency_avg", "commit_latency_max", "poll_records_avg", "poll_records_max"):
        values = [v for s in scrapes for v in s.values(f"kafka_streams_stream_thread_metrics_{name}", **labels)]
        assert values and min(values) >= 0 and max(values) > 0, (name, values)
    assert sum(last.values("kafka_streams_stream_task_metrics_process_total", **labels)) >= good
    # the standbys apply what the actives write to the changelogs
    updates = [v for s in scrapes for v in s.values("kafka_streams_stream_task_metrics_update_rate", role="standby",
                                                     **labels)]
    assert updates and max(updates) > 0, updates
    standby_lags = last.values("stateful_streams_standby_lag_records", role="standby", **labels)
    assert len(standby_lags) == 2 and min(standby_lags) >= 0, standby_lags
    assert sum(last.values("kafka_streams_stream_task_metrics_dropped_records_total", reason="deserialization",
                           **labels)) == bad
    assert last.values("stateful_streams_transaction_aborts_total", **labels) == [0.0, 0.0]
    ages = last.values("stateful_streams_snapshot_age_seconds", **labels)
    assert ages and all(0 <= age < 600 for age in ages), ages
    assert last.value("stateful_streams_status_up", **labels) == 1
    assert last.values("stateful_streams_instance_stale", **labels) == [0.0, 0.0]
    assert last.value("stateful_streams_tasks", state="running", **labels) == 2
    assert last.value("stateful_streams_live_instances", **labels) == 2
    # one target for every application: this one among those of the other tests on the broker
    everything = scrape(airflow)
    assert everything.value("stateful_streams_connection_up", conn_id="stateful_streams_default") == 1
    assert everything.value("stateful_streams_live_instances", **labels) == 2
    oncall_app.close()  # the example DAGs' test does not need it running
    wait_until(lambda: scrape(airflow, app).value("stateful_streams_live_instances", **labels) == 0, 60,
               "the stopped application to show no live instance")


# ---------------------------------------------------------------------------- the example DAGs


class StateWatch(threading.Thread):
    """Every state each task instance of a run was seen in, through the REST API. A call
    that times out or fails is kept in ``errors`` (the waits print them) and the next round
    asks again: an observer that died on one slow answer would leave the test waiting on
    states it no longer reads."""

    def __init__(self, airflow: LocalAirflow, dag_id: str, run_id: str) -> None:
        super().__init__(name="state-watch", daemon=True)
        self.airflow, self.dag_id, self.run_id = airflow, dag_id, run_id
        self.seen: dict[str, list[str]] = defaultdict(list)
        self.run_state = "queued"
        self.errors: list[str] = []
        self._closing = threading.Event()

    def run(self) -> None:
        while not self._closing.is_set():
            try:
                # the run's state first: once it has ended, the task states read after it are
                # final (read the other way round, a task ending between the two calls was
                # last seen running in a run seen finished)
                run_state = self.airflow.run_state(self.dag_id, self.run_id)
                states = self.airflow.task_states(self.dag_id, self.run_id)
            except (AirflowServicesError, OSError) as exc:
                self.errors.append(f"{time.strftime('%H:%M:%S')} {exc!r}")
            else:
                for task_id, state in states.items():
                    if state and (not self.seen[task_id] or self.seen[task_id][-1] != state):
                        self.seen[task_id].append(state)
                self.run_state = run_state
                if run_state in FINISHED_RUN_STATES:
                    return
            self._closing.wait(0.2)

    def report(self) -> str:
        """What the watch saw, for a wait's failure message."""
        return f"states seen {dict(self.seen)}; failed calls {self.errors[-5:]}"

    def close(self) -> None:
        self._closing.set()
        self.join(30)


def start_run(airflow: LocalAirflow, dag_id: str, conf: dict) -> StateWatch:
    airflow.wait_for_dag(dag_id)
    watch = StateWatch(airflow, dag_id, airflow.trigger(dag_id, conf))
    watch.start()
    return watch


def finish_run(airflow: LocalAirflow, watch: StateWatch, timeout: float) -> str:
    """Until the run ends; returns its id."""
    try:
        wait_until(lambda: airflow.check_running() or not watch.is_alive(), timeout,
                   f"the {watch.dag_id} run to finish", lambda: f"{watch.report()}\n{airflow.logs()}",
                   interval=0.5)
    finally:
        watch.close()
    return watch.run_id


def assert_deferred_and_resumed(airflow: LocalAirflow, watch: StateWatch, task_id: str) -> None:
    """The task runner deferred the task, the triggerer ran its trigger, and a worker resumed it
    to success: its log, read through the API. The trigger's own lines show that the triggerer
    ran it (the application did not exist yet when it started: "not readable (retrying in"),
    not Airflow's "Trigger fired event": the triggerer's runner sends its lines to the trigger's
    log file asynchronously, and that last line can miss the file (seen once in 3 runs)."""
    def read() -> str:
        return airflow.task_log(watch.dag_id, watch.run_id, task_id)

    def triggered(log: str) -> bool:
        deferred = log.find("Pausing task as DEFERRED")
        return deferred >= 0 and "not readable (retrying in" in log[deferred:]

    wait_until(lambda: triggered(read()), 120, f"the trigger's lines after the deferral in {task_id}'s log",
               lambda: read()[-3000:])
    assert watch.seen[task_id][-1] == "success", (task_id, watch.report())


def assert_links(airflow: LocalAirflow, dag_id: str, run_id: str, task_id: str, app_id: str, *,
                 max_lag: int | None = None) -> str:
    """The task instance's extra links, read through the REST API: the page of the application
    (which answers a logged-in user) and the Spark UI; returns the Spark UI address."""
    answer = airflow.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/"
                                f"{task_id}/links")
    links = answer["extra_links"]
    assert sorted(links) == ["Spark UI", "Stateful streams"], (task_id, answer)
    query = {"application_id": app_id, "conn_id": "stateful_streams_default",
             **({} if max_lag is None else {"max_lag": str(max_lag)})}
    assert links["Stateful streams"] == f"{airflow.url}/stateful-streams/?{urllib.parse.urlencode(query)}", links
    page = links["Stateful streams"][len(airflow.url):]
    status, _, body = airflow.get(page, headers={"Authorization": f"Bearer {airflow.token()}"})
    assert status == 200 and "<title>Stateful streams</title>" in body, (status, body[:500])
    assert links["Spark UI"] and links["Spark UI"].startswith("http://"), (task_id, links)
    return links["Spark UI"]


@pytest.mark.spark
def test_example_dags_on_airflow_services_and_a_spark_cluster(airflow, spark_cluster, bootstrap_servers):
    app_id = f"services-{uuid.uuid4().hex[:6]}"
    host, port = spark_cluster.master_url.rsplit(":", 1)
    airflow.api("POST", "/api/v2/connections", {"connection_id": "spark_default", "conn_type": "spark", "host": host,
                                                 "port": int(port), "extra": json.dumps({"deploy-mode": "client"})})
    stopped_application = False
    try:
        # Waiting for an application that does not run yet: both sensors must defer.
        waiting = start_run(airflow, "wait_for_state", {"application_id": app_id})
        wait_until(lambda: [waiting.seen[t][-1:] for t in WAIT_SENSORS] == [["deferred"]] * 2, 120,
                   "both wait_for_state sensors deferred", lambda: f"{waiting.report()}\n{airflow.logs()}")

        pipeline = start_run(airflow, "stateful_pipeline", {
            "application_id": app_id, "topic_prefix": f"{app_id}-", "users": 50, "clicks": 1500, "payments": 300})
        run_id = finish_run(airflow, pipeline, timeout=420)
        task_states = airflow.task_states("stateful_pipeline", run_id)
        assert pipeline.run_state == "success", (task_states, pipeline.report(), airflow.logs())
        assert set(task_states.values()) == {"success"}, task_states
        # its sensors poll once before deferring: whether they deferred depends on how far the
        # instances are by then, so it is shown, not asserted
        print(f"stateful_pipeline sensors: { {t: pipeline.seen[t] for t in PIPELINE_SENSORS} }")

        finish_run(airflow, waiting, timeout=120)
        assert waiting.run_state == "success", (waiting.report(), airflow.logs())
        for sensor in WAIT_SENSORS:
            assert_deferred_and_resumed(airflow, waiting, sensor)

        # the instances run on the cluster's executors
        documents = read_status_documents(bootstrap_servers, app_id)
        assert sorted(documents) == [f"{app_id}-0", f"{app_id}-1"]
        assert all(d.state == "RUNNING" for d in documents.values()), documents
        for document in documents.values():
            spark_cluster.executor_of(document.pid)  # raises unless it runs under an executor JVM
        submitted = airflow.xcom("stateful_pipeline", run_id, "submit_topology")
        assert submitted["master"] == spark_cluster.master_url and submitted["deploy_mode"] == "client", submitted
        assert submitted["spark_application_id"].startswith("app-"), submitted  # a standalone master's id
        reported = airflow.xcom("stateful_pipeline", run_id, "report")
        # every payment priced (sessions are emitted when they close, which this short input may not reach)
        assert reported["payments_usd"] == 300, reported

        # extra links: the operator's and both sensors', in the pipeline (sensors resumed or
        # not) and in wait_for_state (sensors that deferred before the application existed)
        spark_ui = {assert_links(airflow, "stateful_pipeline", run_id, "submit_topology", app_id),
                    assert_links(airflow, "stateful_pipeline", run_id, "wait_for_restoration", app_id),
                    assert_links(airflow, "stateful_pipeline", run_id, "check_standby_lag", app_id, max_lag=1000),
                    *(assert_links(airflow, "wait_for_state", waiting.run_id, sensor, app_id,
                                   max_lag=10_000 if sensor == "standbys_warm" else None) for sensor in WAIT_SENSORS)}
        assert spark_ui == {submitted["spark_ui_url"]}, (spark_ui, submitted)
        # the link is the driver's UI of that very application (its REST API, beside the pages)
        with urllib.request.urlopen(submitted["spark_ui_url"].rstrip("/") + "/api/v1/applications",
                                    timeout=30) as response:
            served = [a["id"] for a in json.loads(response.read())]
        assert served == [submitted["spark_application_id"]], (served, submitted)

        maintenance = start_run(airflow, "store_maintenance", {"application_id": app_id, "mode": "online"})
        maintenance_id = finish_run(airflow, maintenance, timeout=180)
        assert maintenance.run_state == "success", (maintenance.report(), airflow.logs())
        retention = airflow.xcom("store_maintenance", maintenance_id, "enforce_retention")
        compaction = airflow.xcom("store_maintenance", maintenance_id, "compact")
        for report in (retention, compaction):
            assert report, report
            # one row per store each instance maintained
            assert {r["instance"] for r in report} == set(documents) and all(r["store"] for r in report), report
        changelogs = airflow.xcom("store_maintenance", maintenance_id, "check_changelog_configs")
        assert changelogs, changelogs

        out = io.StringIO()
        code = cli.main(["stop", app_id, "--bootstrap-servers", bootstrap_servers, "--timeout", "120"], out=out)
        assert code == 0, out.getvalue()
        stopped_application = True
    finally:
        if not stopped_application:
            cli.main(["stop", app_id, "--bootstrap-servers", bootstrap_servers, "--timeout", "60"], out=io.StringIO())
