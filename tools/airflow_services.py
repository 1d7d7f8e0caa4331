"""A real Airflow deployment on loopback: API server, scheduler, DAG processor and triggerer as
separate processes, for tests and developers.

The way Airflow runs for real, only small: the embedded SQLite metadata database with the
LocalExecutor (the executor Airflow supports with it), the simple auth manager with one user,
one JWT secret shared by every component, and the execution API on the API server. DAGs come
from ``dags_folder``; connections are given as ``AIRFLOW_CONN_*`` variables in ``env``.

From Python::

    with LocalAirflow(home, dags_folder=Path("dags"), env={"AIRFLOW_CONN_...": "..."}) as airflow:
        run_id = airflow.trigger("stateful_pipeline", conf={...})
        airflow.wait_for_run("stateful_pipeline", run_id, timeout=300)

The client methods speak Airflow's public REST API (``/api/v2``) with a token from
``/auth/token``, as any external system would. Two users exist: ``admin`` (role admin) and
``viewer`` (role viewer: may read DAGs, not connections).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tools.local_processes import die_with_parent, free_loopback_port, process_cpu_seconds
from tools.waits import wait_progressing

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
FINISHED_RUN_STATES = ("success", "failed")
USER, PASSWORD = "admin", "admin-password"
VIEWER, VIEWER_PASSWORD = "viewer", "viewer-password"
PASSWORDS = {USER: PASSWORD, VIEWER: VIEWER_PASSWORD}
STOP_GRACE_SECONDS = 30.0
#: Which part of the API server's health answer each component is.
HEALTH_PARTS = {"api-server": "metadatabase", "scheduler": "scheduler", "dag-processor": "dag_processor",
                "triggerer": "triggerer"}
#: The start gives up after this long even while the services still compute (a safety net).
START_CAP_SECONDS = 1200.0


class AirflowServicesError(RuntimeError):
    """The local Airflow services could not be started, or a REST call failed."""


class LocalAirflow:
    """Airflow's four services on 127.0.0.1 with their home, database and logs in ``home``."""

    def __init__(self, home: str | os.PathLike, *, dags_folder: str | os.PathLike,
                 env: Mapping[str, str] | None = None, start_stall: float = 120.0) -> None:
        self.home = Path(home).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self.extra_env = dict(env or {})
        #: the start fails once what it waits for has used no CPU for this long (seconds)
        self.start_stall = start_stall
        self.port: int | None = None
        self.processes: dict[str, subprocess.Popen] = {}
        self._tokens: dict[str, str] = {}
        self.start_seconds: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """What every component (and so every task) runs with."""
        bin_dir = str(Path(sys.executable).parent)
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
        return {
            **inherited,
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API_AUTH__JWT_SECRET": self._secret("jwt_secret"),
            "AIRFLOW__API__SECRET_KEY": self._secret("secret_key"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin,{VIEWER}:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            # a new DAG file is seen within seconds, not the 5-minute default
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # a DAG file is parsed again when it changes (its modification time, the default
            # sort mode), not every 30 s besides: parsing the unchanged folder took 7.4 of the
            # services' 11.5 CPU-s a minute on 2 cores
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
            **self.extra_env,
        }

    def _secret(self, name: str) -> str:
        path = self.home / f".{name}"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(32))
        return path.read_text()

    def log_path(self, component: str) -> Path:
        return self.home / f"{component}.log"

    def log_tail(self, component: str, lines: int = 30) -> str:
        path = self.log_path(component)
        if not path.exists():
            return f"({path} was not written)"
        return f"--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def logs(self, lines: int = 30) -> str:
        return "\n".join(self.log_tail(c, lines) for c in COMPONENTS)

    # ---------------------------------------------------------------- start

    def start(self) -> LocalAirflow:
        """Migrate the database, start the four services and wait until they are healthy and
        the execution API has answered once. Each step waits on the CPU the processes it waits
        for use (a loaded machine only makes it slower) and fails once they used none for
        ``start_stall`` seconds."""
        if self.processes:
            raise AirflowServicesError("these Airflow services are already started")
        began = time.monotonic()
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = free_loopback_port()
        (self.home / "passwords.json").write_text(json.dumps(PASSWORDS))
        env = self.environment()
        migrate = subprocess.Popen([_airflow(), "db", "migrate"], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                   preexec_fn=die_with_parent)
        output: list[str] = []
        reader = threading.Thread(target=lambda: output.append(migrate.stdout.read()),  # type: ignore[union-attr]
                                  daemon=True, name="airflow-db-migrate-output")
        reader.start()
        stalled: AirflowServicesError | None = None
        try:
            self._wait_starting(lambda: migrate.poll() is not None, "airflow db migrate", lambda: [migrate.pid],
                                context=lambda: "")
        except AirflowServicesError as exc:
            stalled = exc
        finally:
            if migrate.poll() is None:
                migrate.kill()
            migrate.wait()
            reader.join(30)
        if stalled is not None or migrate.returncode != 0:
            raise AirflowServicesError(f"{stalled or 'airflow db migrate failed'} in {self.home}:\n"
                                       f"{''.join(output)[-4000:]}")
        try:
            for component in COMPONENTS:
                args = ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"] \
                    if component == "api-server" else []
                with open(self.log_path(component), "ab") as log:
                    self.processes[component] = subprocess.Popen(
                        [_airflow(), component, *args], stdout=log, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, env=env, cwd=self.home, preexec_fn=die_with_parent)
            self._wait_healthy()
            self._warm_execution_api()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _wait_starting(self, done: Callable[[], bool], what: str, pids: Callable[[], Iterable[int]], *,
                       context: Callable[[], str] | None = None) -> None:
        """Until ``done()``; progress is the CPU that the processes ``pids()`` names at each
        moment use (their CPU counted while they are the ones waited for). A stall fails with
        ``context()`` (the services' logs by default)."""
        last: dict[int, float] = {}
        used = 0.0

        def progress() -> float:
            nonlocal used
            for pid in pids():
                try:
                    now = process_cpu_seconds(pid, descendants=True)
                except OSError:  # ended meanwhile: done() or check_running() says so next round
                    continue
                used += now - last.get(pid, now)
                last[pid] = now
            return used

        try:
            wait_progressing(done, progress, what, measure="CPU seconds of the processes waited for",
                             stall=self.start_stall, cap=START_CAP_SECONDS, context=context or self.logs,
                             interval=1.0)
        except AssertionError as exc:
            raise AirflowServicesError(f"{exc}") from None

    def _wait_healthy(self) -> None:
        """Until the API server answers and reports the scheduler, DAG processor and triggerer
        healthy; waiting on the API server until it answers, then on the components it
        reports unhealthy."""
        waiting_on = ["api-server"]
        health: Any = None

        def healthy() -> bool:
            nonlocal health
            self.check_running()
            try:
                health = self.api("GET", "/api/v2/monitor/health", authenticated=False)
            except (AirflowServicesError, OSError) as exc:
                health, waiting_on[:] = repr(exc), ["api-server"]
                return False
            waiting_on[:] = [component for component, part in HEALTH_PARTS.items()
                             if health.get(part, {}).get("status") != "healthy"]
            return not waiting_on

        try:
            self._wait_starting(healthy, "the Airflow services to be healthy",
                                lambda: [self.processes[component].pid for component in waiting_on])
        except AirflowServicesError as exc:
            raise AirflowServicesError(f"{exc}\nlast health: {health}") from None

    def _warm_execution_api(self) -> None:
        """The execution API (Cadwyn) builds its versioned routes on its first request, on the
        server's event loop: 6-8 s of CPU on an idle 2-core machine, 30-60 s on a loaded one,
        during which the whole API server answers nothing and the first task runners' calls
        time out (``[workers] execution_api_timeout``). One request here moves that into the
        start-up, waited for while the API server computes."""
        answers: list[Any] = []

        def ask() -> None:
            try:
                answers.append(self.api("GET", "/execution/health", authenticated=False, timeout=START_CAP_SECONDS))
            except (AirflowServicesError, OSError) as exc:
                answers.append(exc)

        request = threading.Thread(target=ask, daemon=True, name="airflow-execution-api-warm-up")
        request.start()
        self._wait_starting(lambda: (self.check_running(), not request.is_alive())[1],
                            "the execution API's first answer", lambda: [self.processes["api-server"].pid])
        if answers != [{"status": "healthy"}]:
            raise AirflowServicesError(f"the execution API's first request answered {answers!r}\n{self.logs()}")

    def check_running(self) -> None:
        for component, process in self.processes.items():
            if process.poll() is not None:
                raise AirflowServicesError(f"airflow {component} exited with {process.returncode}:\n"
                                           f"{self.log_tail(component, 60)}")

    # ---------------------------------------------------------------- REST client

    def api(self, method: str, path: str, body: Any = None, *, authenticated: bool = True,
            timeout: float = 30.0) -> Any:
        """One call of the REST API; the JSON answer, or AirflowServicesError with the body."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if authenticated:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise AirflowServicesError(f"{method} {path} answered {exc.code}: "
                                       f"{exc.read().decode(errors='replace')[:2000]}") from None
        return json.loads(text) if text else None

    def token(self, user: str = USER) -> str:
        if user not in self._tokens:
            answer = self.api("POST", "/auth/token", {"username": user, "password": PASSWORDS[user]},
                              authenticated=False)
            self._tokens[user] = answer["access_token"]
        return self._tokens[user]

    def get(self, path: str, *, headers: Mapping[str, str] | None = None) -> tuple[int, dict[str, str], str]:
        """A plain GET (a page, a metrics scrape): status, headers and body, errors included;
        no redirect is followed."""
        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None

        request = urllib.request.Request(self.url + path, headers=dict(headers or {}))
        try:
            with urllib.request.build_opener(NoRedirect).open(request, timeout=60) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read().decode(errors="replace")

    def wait_for_dag(self, dag_id: str, timeout: float = 120) -> dict:
        """Until the DAG processor has parsed ``dag_id``; fails at once on an import error."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_running()
            errors = self.api("GET", "/api/v2/importErrors")
            if errors["total_entries"]:
                raise AirflowServicesError(f"DAG import errors: {json.dumps(errors['import_errors'], indent=1)}")
            try:
                return self.api("GET", f"/api/v2/dags/{dag_id}")
            except AirflowServicesError:
                if time.monotonic() > deadline:
                    raise AirflowServicesError(f"DAG {dag_id} not parsed within {timeout}s:\n"
                                               f"{self.log_tail('dag-processor')}") from None
            time.sleep(1)

    def trigger(self, dag_id: str, conf: Mapping[str, Any]) -> str:
        """Unpause ``dag_id`` and trigger a run with ``conf``; returns the run id."""
        self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        run = self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": dict(conf)})
        return run["dag_run_id"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        answer = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances")
        return {ti["task_id"]: ti["state"] for ti in answer["task_instances"]}

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}")["state"]

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        entry = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/"
                                f"{task_id}/xcomEntries/{key}")
        return entry["value"]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """The task's log as the UI shows it: the events of the try, one per line."""
        answer = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/"
                                 f"{task_id}/logs/{try_number}?full_content=true")
        content = answer["content"]
        return "\n".join(e.get("event", "") if isinstance(e, dict) else str(e) for e in content) \
            if isinstance(content, list) else str(content)

    # ---------------------------------------------------------------- stop

    def stop(self) -> dict[str, int | None]:
        """SIGTERM every component (the scheduler first: it ends its executor's workers);
        returns their exit codes (None: had to be killed)."""
        codes: dict[str, int | None] = {}
        processes, self.processes = self.processes, {}
        for component in ("scheduler", "triggerer", "dag-processor", "api-server"):
            process = processes.get(component)
            if process is None:
                continue
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                codes[component] = process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_GRACE_SECONDS)
                codes[component] = None
        return codes

    def __enter__(self) -> LocalAirflow:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _airflow() -> str:
    return str(Path(sys.executable).parent / "airflow")
