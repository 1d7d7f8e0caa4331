"""tools/airflow_services.py's start waits on the CPU the starting processes use: an API
server that computes past the stall limit before it answers is waited for, one that hangs
fails within the stall limit naming what was waited for. The services are a stand-in
``airflow`` command (a Python script): real processes, real HTTP, no Airflow."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

import tools.airflow_services as airflow_services
from tools.airflow_services import AirflowServicesError, LocalAirflow

STALL = 2.0

#: ``airflow db migrate`` computes a moment; the API server computes ``FAKE_API_BUSY`` seconds
#: (or sleeps for good with ``FAKE_API_BUSY=hang``), then answers every health check healthy;
#: the other components idle until SIGTERM.
FAKE_AIRFLOW = f"""#!{sys.executable}
import http.server, json, os, signal, sys, time

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

def busy(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

args = sys.argv[1:]
if args[:2] == ["db", "migrate"]:
    busy(0.2)
    sys.exit(0)
if args[0] != "api-server":
    while True:
        time.sleep(1)
if os.environ["FAKE_API_BUSY"] == "hang":
    while True:
        time.sleep(1)
busy(float(os.environ["FAKE_API_BUSY"]))
HEALTHY = {{"status": "healthy"}}

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = HEALTHY if self.path == "/execution/health" else {{
            part: HEALTHY for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")}}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", int(args[args.index("--port") + 1])), Health).serve_forever()
"""


@pytest.fixture
def fake_airflow(tmp_path, monkeypatch) -> Path:
    script = tmp_path / "bin" / "airflow"
    script.parent.mkdir()
    script.write_text(FAKE_AIRFLOW)
    script.chmod(0o755)
    monkeypatch.setattr(airflow_services, "_airflow", lambda: str(script))
    return script


def _services(tmp_path: Path, api_busy: str) -> LocalAirflow:
    return LocalAirflow(tmp_path / "home", dags_folder=tmp_path, env={"FAKE_API_BUSY": api_busy}, start_stall=STALL)


def test_an_api_server_computing_past_the_stall_limit_is_waited_for(tmp_path, fake_airflow):
    airflow = _services(tmp_path, api_busy=str(2 * STALL))
    try:
        airflow.start()
        assert airflow.start_seconds is not None and airflow.start_seconds > 2 * STALL
        assert airflow.api("GET", "/execution/health", authenticated=False) == {"status": "healthy"}
    finally:
        codes = airflow.stop()
    assert codes == {"scheduler": 0, "triggerer": 0, "dag-processor": 0, "api-server": 0}


def test_an_api_server_that_hangs_fails_the_start_within_the_stall_limit(tmp_path, fake_airflow):
    airflow = _services(tmp_path, api_busy="hang")
    began = time.monotonic()
    with pytest.raises(AirflowServicesError) as failure:
        airflow.start()
    assert STALL <= time.monotonic() - began < 60
    message = str(failure.value)
    assert message.startswith(f"no progress for {STALL:g}s waiting for the Airflow services to be healthy: "
                              "CPU seconds of the processes waited for stayed at")
    assert "last health: URLError(ConnectionRefusedError(111, 'Connection refused'))" in message
    assert airflow.processes == {}  # stopped on the way out


def test_a_failed_migration_is_reported_with_its_output(tmp_path, fake_airflow):
    fake_airflow.write_text(f"#!{sys.executable}\nimport sys\nprint('no such table: {json.dumps('dag')}')\n"
                            "sys.exit(3)\n")
    with pytest.raises(AirflowServicesError, match=r"airflow db migrate failed in .*:\nno such table: \"dag\""):
        _services(tmp_path, api_busy="0").start()


def test_a_migration_that_hangs_fails_within_the_stall_limit_with_its_output(tmp_path, fake_airflow):
    fake_airflow.write_text(f"#!{sys.executable}\nimport time\nprint('waiting for the database lock', flush=True)\n"
                            "time.sleep(3600)\n")
    began = time.monotonic()
    with pytest.raises(AirflowServicesError) as failure:
        _services(tmp_path, api_busy="0").start()
    assert STALL <= time.monotonic() - began < 60
    assert str(failure.value).startswith(f"no progress for {STALL:g}s waiting for airflow db migrate: ")
    assert str(failure.value).endswith(":\nwaiting for the database lock\n")
