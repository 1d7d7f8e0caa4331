"""``stateful-streams status``: --check's exit codes and stderr, --watch on a terminal and on a
pipe, rich tables on a terminal, the new usage errors. The status read is replaced by a
snapshot built from documents (the real read is covered by tests/integration/test_cli_health.py)."""

from __future__ import annotations

import io
import json
import signal

import pytest

from airflow_stateful_provider.cli import main
from airflow_stateful_provider.cli import status as cli_status
from airflow_stateful_provider.streams.errors import BrokerUnreachableError, UnknownApplicationError
from airflow_stateful_provider.streams.status.application import build_application_status
from airflow_stateful_provider.streams.status.document import InstanceStatus
from tests.unit.streams.status.status_documents import APP, NOW_MS, changelog, document, task

HEALTHY = [document("i-1", task("0_0"), task("0_1", "active", "restoring", changelog(1, 0, 250, 1_000, 50.0)))]
UNHEALTHY = [document("i-1", task("0_0"), published_at=NOW_MS - 90_000),
             document("i-2", task("0_1", "standby", "running", changelog(1, 0, 5, 5)))]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def reads(monkeypatch):
    """The snapshots the next status reads return, in order (an exception is raised)."""
    queue: list = []

    def fetch(servers, application_id, **kwargs):
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        docs = [InstanceStatus.from_dict(d, key=d["instance_id"]) for d in item]
        return build_application_status(docs, {}, NOW_MS, kwargs["stale_after_ms"], application_id=application_id)

    monkeypatch.setattr("airflow_stateful_provider.streams.status.reader.fetch_application_status", fetch)
    return queue


def status(*argv: str, out=None) -> tuple[int, str]:
    out = out if out is not None else io.StringIO()
    code = main(["status", APP, "--bootstrap-servers", "b:9092", *argv], out=out)
    return code, out.getvalue()


def test_check_exits_0_when_healthy_with_a_summary(reads, capsys):
    reads.append(HEALTHY)
    assert status("--check") == (0, f"OK: application {APP}: 1 instance(s), 2 task(s): 1 running, 1 restoring\n")
    assert capsys.readouterr().err == ""


def test_check_exits_1_with_the_reasons_on_one_line_of_stderr(reads, capsys):
    reads.append(UNHEALTHY)
    code, out = status("--check")
    assert code == 1 and out.startswith("UNHEALTHY:")
    assert capsys.readouterr().err == ("unhealthy: instance i-1@host-i-1 is stale: last status 1m30s ago (bound 30s); "
                                       "no instance runs task(s) 0_1; only a stale instance claims task(s) 0_0\n")


def test_check_json_carries_the_verdict(reads):
    reads.append(UNHEALTHY)
    code, out = status("--check", "--json")
    data = json.loads(out)
    assert code == 1 and data["healthy"] is False and len(data["problems"]) == 3 and data["application_id"] == APP


def test_check_of_an_application_without_live_instances_is_unhealthy(reads, capsys):
    reads.append(UnknownApplicationError(f"application {APP!r} has no live status documents"))
    assert status("--check") == (1, "")
    assert capsys.readouterr().err == f"unhealthy: application {APP!r} has no live status documents\n"


def test_check_with_unreachable_brokers_exits_3(reads, capsys):
    reads.append(BrokerUnreachableError("cannot reach Kafka at b:9092 within 10000 ms"))
    assert status("--check")[0] == 3
    assert capsys.readouterr().err == "error: cannot reach Kafka at b:9092 within 10000 ms\n"


@pytest.mark.parametrize("argv, says", [
    (["--check", "--watch", "1"], "--check answers once; it does not combine with --watch"),
    (["--max-standby-lag", "5"], "--max-standby-lag takes a number >= 0 and goes with --check, got 5 without --check"),
    (["--check", "--max-input-lag", "-1"], "--max-input-lag takes a number >= 0 and goes with --check, got -1"),
    (["--conn-id", "kafka"], "--conn-id 'kafka' says where Kafka is and how to log in; drop --bootstrap-servers"),
])
def test_usage_errors_exit_2(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_info:
        status(*argv)
    assert exit_info.value.code == 2
    assert says in capsys.readouterr().err


def test_help_lists_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    text = capsys.readouterr().out
    assert "exit codes:" in text and "3  Kafka unreachable" in text and "--check" in text


def test_watch_on_a_pipe_appends_stamped_tables_and_goes_on_after_a_failed_read(reads, monkeypatch):
    reads += [HEALTHY, BrokerUnreachableError("cannot reach Kafka at b:9092"), HEALTHY]
    naps: list[float] = []

    def wait(ctrl_c, seconds):  # the pause between two reads; Ctrl-C during the third
        naps.append(seconds)
        if len(naps) == 3:
            ctrl_c._interrupted(signal.SIGINT, None)
        return ctrl_c.is_set()

    monkeypatch.setattr(cli_status._CtrlC, "wait", wait)
    previous = signal.getsignal(signal.SIGINT)
    code, out = status("--watch", "2")
    assert code == 0 and naps == [2.0, 2.0, 2.0]
    assert signal.getsignal(signal.SIGINT) is previous  # the watch gave Ctrl-C back
    assert out.count("--- ") == 3 and out.count(f"application {APP}: 1 instance(s)") == 2
    assert "BrokerUnreachableError: cannot reach Kafka at b:9092 (retrying every 2s)" in out
    assert "\x1b" not in out  # no escape codes in a file


def test_a_terminal_gets_rich_tables_with_a_progress_bar(reads, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    reads.append(HEALTHY)
    code, out = status(out=Terminal())
    assert code == 0
    assert "250/1,000 (25%)" in out and "━" in out  # the bar is drawn with rich's line characters
    assert "RESTORATION" in out and "INPUT LAG" in out and "i-1@host-i-1" in out
