"""``stateful-streams restart --rolling``: usage errors before anything is read, what reaches
rolling_restart, the report, and a stuck step (exit 1, one line)."""

from __future__ import annotations

import io
import json
from unittest import mock

import pytest

from airflow_stateful_provider.cli import main
from airflow_stateful_provider.streams.control.rolling_restart import InstanceRestart, RollingRestartReport
from airflow_stateful_provider.streams.errors import RollingRestartError

RESTART = "airflow_stateful_provider.streams.control.rolling_restart.rolling_restart"
KAFKA = ["--bootstrap-servers", "b:9092"]
REPORT = RollingRestartReport("clicks", 10_000, (InstanceRestart("clicks-0", 1, 2, ("0_0",), 0.25, 3.5),), 4.0)


@pytest.mark.parametrize(("args", "message"), [
    (["restart", "clicks", *KAFKA], "the following arguments are required: --rolling"),
    (["restart", "clicks", "--rolling", "--max-lag-records", "-1", *KAFKA], "--max-lag-records takes a number >= 0"),
    (["restart", "clicks", "--rolling", "--step-timeout", "0", *KAFKA], "--step-timeout and --stale-after take"),
])
def test_bad_arguments_are_usage_errors_before_kafka_is_asked(args, message, capsys):
    with mock.patch(RESTART) as restart, pytest.raises(SystemExit) as exit_info:
        main(args, out=io.StringIO())
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    restart.assert_not_called()


def test_the_steps_then_the_report():
    def restart(*args, progress, **kwargs):
        progress("clicks-0: restart r-1 sent")
        return REPORT

    out = io.StringIO()
    with mock.patch(RESTART, side_effect=restart) as called:
        code = main(["restart", "clicks", "--rolling", "--instance", "clicks-0", "--step-timeout", "30", *KAFKA],
                    out=out)
    assert code == 0
    kwargs = called.call_args.kwargs
    assert (kwargs["instances"], kwargs["step_timeout_ms"], kwargs["max_lag_records"]) == (["clicks-0"], 30_000, 10_000)
    assert out.getvalue().splitlines() == ["clicks-0: restart r-1 sent",
                                           "rolling restart of clicks: 1 instance(s) restarted in 4.0s",
                                           "  clicks-0: epoch 1 -> 2, waited 0.2s for standbys, back in 3.5s"]


def test_json_is_the_report_alone():
    out = io.StringIO()
    with mock.patch(RESTART, return_value=REPORT):
        assert main(["restart", "clicks", "--rolling", "--json", *KAFKA], out=out) == 0
    assert json.loads(out.getvalue())["restarts"][0]["new_epoch"] == 2


def test_a_stuck_step_exits_1_with_its_message(capsys):
    with mock.patch(RESTART, side_effect=RollingRestartError("rolling restart of clicks stopped at clicks-1: ...")):
        assert main(["restart", "clicks", "--rolling", *KAFKA], out=io.StringIO()) == 1
    assert capsys.readouterr().err == "error: rolling restart of clicks stopped at clicks-1: ...\n"
